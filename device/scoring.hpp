#pragma once
//! Scoring prefills (a C3 extension, docs/device.md "Scoring prefills"): a prefill
//! program that also returns, for every position of its chunk, the logprob of a token
//! the host names (the next prompt token) and the top-N alternatives there, so a
//! prompt is scored in the pass that prefills it (docs/api.md "Scoring").
//!
//! Tensors (derived for every prefill program; T = the program's max_tokens):
//!   input  "score_request"      int32 [T,2]   per position: the target token (-1: none)
//!                                              and how many alternatives (0..k_score_top_max)
//!   output "score_logprobs"     fp32  [T]     the target's logprob (0 where none)
//!   output "score_top_ids"      int32 [T,N]   the top-N ids, most likely first (-1 past top-N)
//!   output "score_top_logprobs" fp32  [T,N]   their logprobs                 (N = k_score_top_max)
//! "score_request" is optional: a prefill that does not write it is a plain prefill and
//! returns only "logits" (the scoring outputs are then stale and not copied out). A job
//! that writes it is sliced as its "token" input is, and returns its positions' scores.
//! Every infer consumes it, a refused one too (unlike the required inputs, which stay
//! written for a retry): a stale request never turns a later plain prefill into scoring.
//!
//! Cost on the NPU: the LM head (hidden x vocab) runs over every position of the chunk
//! instead of the last one, then a log-softmax and a top-N per position; the output copy
//! moves 4 + 8 N bytes per position instead of nothing (the latency model prices both,
//! latency_model.hpp `score_ms`).
//!
//! Exactness: the scores are the host sampler's own arithmetic (model::sampler::score) on
//! each position's BF16 logits at temperature 1, and each position's logits are what
//! decoding that token would give (model::causal_lm::prefill_scored), so a prompt token
//! scores the logprob it gets when generated greedily, bit for bit.
#include <cstdint>
#include <string_view>

namespace calserve::device {

inline constexpr std::string_view k_score_request = "score_request";
inline constexpr std::string_view k_score_logprobs = "score_logprobs";
inline constexpr std::string_view k_score_top_ids = "score_top_ids";
inline constexpr std::string_view k_score_top_logprobs = "score_top_logprobs";

// Most alternatives per position (OpenAI's and vLLM's top_logprobs bound).
inline constexpr std::int64_t k_score_top_max = 20;

constexpr bool is_score_output(std::string_view name) {
    return name == k_score_logprobs || name == k_score_top_ids || name == k_score_top_logprobs;
}

// D2H bytes of one scored position.
constexpr std::uint64_t score_position_d2h_bytes() { return 4 + 8 * std::uint64_t(k_score_top_max); }

}  // namespace calserve::device
