#pragma once
//! Greedy reference runs: prefill a prompt, then repeatedly take the argmax and
//! decode it, recording the top-k (id, logit) pairs of every step. This is the
//! golden corpus of the runbook (`calserve reference`) and what device tests
//! compare against. Ties in the argmax and in the top-k go to the lower token id.
//! Fault model: errors of the model are returned; the sequence is freed either way.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "config/result.hpp"
#include "model/core/causal_lm.hpp"

namespace calserve::model {

struct greedy_step {
    std::vector<std::pair<token_id, float>> top;  // best first
};

struct greedy_run {
    std::vector<token_id> generated;
    std::vector<greedy_step> steps;  // steps[i] holds the logits generated[i] was chosen from
};

// Top k of `logits` by value (ties: lower id first), without sorting the whole vocabulary.
std::vector<std::pair<token_id, float>> top_k_logits(std::span<const float> logits, std::int64_t k);

// Stops after max_tokens or after emitting the model's EOS (which is included).
result<greedy_run> run_greedy(causal_lm& lm, seq_id seq, std::span<const token_id> prompt, std::int64_t max_tokens,
                              std::int64_t top_k);

}  // namespace calserve::model
