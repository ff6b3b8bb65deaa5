#pragma once
//! The standalone runner of document 004 gate G7, on the device interface only (no
//! scheduler, actors or server), so a failure isolates the runtime/package side:
//!   golden - prefill 1/16/17/128/1024/max-1, each followed by decode 1/32/256
//!            (capped by the context), against the reference transformer run
//!            without the device: greedy identical, logits max_abs / max_rel /
//!            cosine / top-5 overlap, KV length; free then reuse a sequence id; two
//!            sequences interleaved on ping and pong with no cross-talk.
//!   fault  - every G7 scenario (missing tensor, wrong CSR, slice out of range, KV
//!            full, submit busy, Wait timeout, CCU exception, reset then warm-up)
//!            plus the other device fault points: each must come back as the
//!            expected structured status within its bound, and the device must be
//!            healthy again afterwards.
//!   stress - random sequences with two jobs in flight for a duration; KV back to
//!            zero at the end; a sample of sequences re-checked against the reference.
//! Each returns a JSON report and a verdict; nothing aborts.
#include <chrono>
#include <cstdint>
#include <vector>

#include <boost/json.hpp>

#include "device/device.hpp"
#include "device/fault_points.hpp"
#include "model/core/causal_lm.hpp"

namespace calserve::device::runner {

struct runner_options {
    timeout wait_limit = std::chrono::seconds(30);
    std::uint64_t seed = 1;
    std::vector<std::int64_t> prefill_lengths = {1, 16, 17, 128, 1024, -1};  // -1 = context - 1
    std::vector<std::int64_t> decode_lengths = {1, 32, 256};
    double min_cosine = 0.999;
    // fault
    timeout fault_wait_limit = std::chrono::milliseconds(200);
    // stress
    std::chrono::milliseconds duration = std::chrono::seconds(10);
    int sequences = 8;
    int max_prompt = 256;
    int max_decode = 64;
    int verify_sequences = 4;
};

struct runner_report {
    bool pass = false;
    boost::json::object json;
};

// `reference` is a separate model instance (not the one inside the device).
runner_report run_golden(device& dev, model::causal_lm& reference, const runner_options& o);
runner_report run_fault(device& dev, fault_registry& faults, model::causal_lm& reference, const runner_options& o);
runner_report run_stress(device& dev, model::causal_lm& reference, const runner_options& o);

// Restores a ready, empty device after a fault (reset + warm-up, retried a few times).
void_result recover(device& dev);

}  // namespace calserve::device::runner
