#pragma once
//! JobContext: everything one device job owns, one per ChipSession slot.
//!
//! A job is one prefill (one row) or one decode batch (1..max_batch live rows,
//! padded by the DeviceActor to the smallest decode profile that holds them).
//! It travels ChipSession -> DeviceActor (fill, infer, wait, copy logits out:
//! H2D..D2H) -> ChipSession -> Sampler -> ChipSession, and only the current
//! holder touches it (the rows' sequences included). The logits buffer is the
//! slot's exclusive host buffer: the slot cannot take a new job until the
//! Sampler has consumed it.
#include <cstdint>
#include <memory>
#include <vector>

#include "actors/sequence.hpp"
#include "config/result.hpp"
#include "device/types.hpp"

namespace calserve::actors {

struct job_context {
    device::slot slot = device::slot::ping;
    std::uint64_t epoch = 0;              // ChipSession's job counter for this slot
    std::vector<sequence_ptr> rows;       // live rows in row order; a prefill has exactly one
    bool prefill = false;
    bool partial = false;                 // a prefill chunk short of the last token: nothing to sample
    std::int64_t profile = 1;             // batch of the submodel that ran it (rows.size() <= profile)
    std::vector<std::int64_t> counts;     // tokens fed per row
    int failed_row = -1;                  // a per-row device call (kv_apply) failed: only that row's request fails
    std::int64_t vocab = 0;
    std::vector<std::byte> logits;        // BF16, >= rows.size() x vocab (D2H target; a padded batch's whole output)
    // The Sampler's answer per row: [0] = chosen token + logprob, then top_logprobs.
    std::vector<result<std::vector<token_logprob>>> picks;
    // Phase times (runtime clock) for metrics and the timing log.
    std::chrono::nanoseconds t_fill{0}, t_submitted{0}, t_done{0}, t_sampled{0};
    double device_compute_s = 0;          // modelled compute time reported by the device

    std::vector<sequence_id> row_ids() const {
        std::vector<sequence_id> ids;
        ids.reserve(rows.size());
        for (const auto& r : rows) ids.push_back(r->seq);
        return ids;
    }
};
using job_ptr = std::shared_ptr<job_context>;

}  // namespace calserve::actors
