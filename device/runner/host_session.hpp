#pragma once
//! A minimal synchronous host driver of the device interface, for the standalone
//! runner (document 004 gate G7) and tests: it does what an adapter does for one
//! job -- apply KV, slice, write token/position, write both CSRs, infer, Wait,
//! read and check the BF16 logits -- with no scheduler, actors or server, so a
//! failure here is a device/package problem, not a serving one.
//!
//! Fault model: every step's status is returned unchanged (the caller sees which
//! call failed in the message); NaN/Inf logits are reported as logits_nan.
//! Invariant: a sequence's host-side length always equals the device's
//! `kv_length` after a successful step.
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "device/bf16.hpp"  // round_to_bf16: references carry the device's output precision
#include "device/device.hpp"
#include "model/core/causal_lm.hpp"

namespace calserve::device::runner {

struct step_output {
    job_result job;
    std::vector<float> logits;  // FP32 from the device's BF16
};

class host_session {
public:
    // Picks the package's first prefill and decode submodels by role.
    host_session(device& dev, timeout wait_limit);

    const submodel_desc& prefill_submodel() const { return *prefill_; }
    const submodel_desc& decode_submodel() const { return *decode_; }
    timeout wait_limit() const { return wait_limit_; }

    // Fills `s` for `tokens` appended to `seq` and submits (KV applied first).
    result<job_id> submit(submodel_kind kind, slot s, seq_id seq, std::span<const model::token_id> tokens);
    // Waits for the job and reads its logits from the slot.
    result<step_output> collect(job_id job, submodel_kind kind, slot s);
    // submit + collect on the ping slot. Prompts longer than the prefill program run in chunks.
    result<step_output> prefill(seq_id seq, std::span<const model::token_id> tokens);
    result<step_output> decode(seq_id seq, model::token_id token);

private:
    const submodel_desc& of(submodel_kind kind) const { return kind == submodel_kind::prefill ? *prefill_ : *decode_; }

    device& dev_;
    timeout wait_limit_;
    const submodel_desc* prefill_ = nullptr;
    const submodel_desc* decode_ = nullptr;
};

// Argmax (lowest index on ties).
model::token_id argmax(std::span<const float> logits);

// Numeric comparison of device logits against reference logits (document 003 section 6).
struct logits_compare {
    double max_abs = 0;
    double max_rel = 0;
    double cosine = 1;
    bool top1_match = true;
    int top5_overlap = 5;
};
logits_compare compare_logits(std::span<const float> device, std::span<const float> reference);

// Deterministic prompt of `n` ordinary token ids (below `limit`) from `seed`.
std::vector<model::token_id> make_prompt(std::size_t n, std::uint64_t seed, std::int64_t limit);

}  // namespace calserve::device::runner
