#pragma once
//! JobContext: everything one device job owns, one per ChipSession slot.
//!
//! It travels ChipSession -> DeviceActor (fill, infer, wait, copy logits out:
//! H2D..D2H) -> ChipSession -> Sampler -> ChipSession, and only the current
//! holder touches it. The logits buffer is the slot's exclusive host buffer:
//! the slot cannot take a new job until the Sampler has consumed it.
#include <cstdint>
#include <memory>
#include <vector>

#include "actors/sequence.hpp"
#include "device/types.hpp"

namespace calserve::actors {

struct job_context {
    device::slot slot = device::slot::ping;
    std::uint64_t epoch = 0;          // ChipSession's job counter for this slot
    sequence_ptr seq;
    bool prefill = false;
    std::int64_t count = 0;           // tokens fed by this job
    std::vector<std::uint16_t> logits;  // BF16, vocab entries (D2H target)
    // Phase times (runtime clock) for metrics and the timing log.
    std::chrono::nanoseconds t_fill{0}, t_submitted{0}, t_done{0}, t_sampled{0};
    double device_compute_s = 0;      // modelled compute time reported by the device
};
using job_ptr = std::shared_ptr<job_context>;

}  // namespace calserve::actors
