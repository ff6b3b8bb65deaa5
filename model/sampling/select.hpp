#pragma once
//! Partial selection for the sampler: never a full sort of the vocabulary.
//!
//! - `select_top`: the k best logits by a threshold scan. A buffer of at most
//!   max(2k, k + 64) candidates is filled with the tokens above the current threshold;
//!   when full it is cut back to the k best with nth_element and the threshold rises to
//!   the k-th value, so most tokens cost one vector compare. Only the k survivors are
//!   sorted.
//! - `radix_cutoff`: where the smallest prefix of the (weight desc, token asc) order
//!   reaches a target mass (top-p) or count (large top-k), found by a three-level radix
//!   descent over the weights' bit patterns (weights are non-negative floats, so bit
//!   order is value order): the 8 exponent bits over the whole vocabulary, then 11 and
//!   12 mantissa bits over the boundary bucket's list only. Each level keeps only the
//!   bucket where the running total crosses the target, so the cost is two passes over
//!   the vocabulary plus passes over ever smaller lists; once a list holds one weight
//!   value it is cut by token order without further levels.
//!
//! Order used everywhere: higher value first, ties to the lower token id. `cutoff`
//! means: keep token i iff (w_i, -i) >= (weight, -index) lexicographically.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "model/core/bf16.hpp"
#include "model/sampling/kernels.hpp"

namespace calserve::model::select {

struct candidate {
    float value;
    std::int32_t token;
};

constexpr bool better(const candidate& a, const candidate& b) {
    return a.value > b.value || (a.value == b.value && a.token < b.token);
}

/// The min(k, #tokens above -inf) best tokens by logit, sorted by `better`. NaN never enters.
void select_top(std::span<const float> logits, std::size_t k, std::vector<candidate>& out, simd_level level);
/// The same over a BF16 row (values compared as their exact FP32 conversion); the row
/// must hold no NaN (the sampler checks first).
/// `block_keys` as filled by kernels::scan_max_bf16 for this row.
void select_top(std::span<const bf16> logits, std::span<const std::int16_t> block_keys, std::size_t k,
                std::vector<candidate>& out, simd_level level);

struct cutoff {
    float weight = 0.0f;
    std::size_t index = 0;
};

/// Keeps everything (the target could not be reached, e.g. by rounding).
constexpr cutoff keep_all(std::size_t n) { return {0.0f, n}; }

struct radix_scratch {
    std::vector<double> hist;
    kernels::index_list list_a;
    kernels::index_list list_b;
};

enum class measure : std::uint8_t { mass, count };

/// Smallest prefix (weight desc, token asc) of `weights` whose mass (or count) reaches
/// `target`; returns the cutoff at its last token, or keep_all when never reached.
cutoff radix_cutoff(std::span<const float> weights, double target, measure by, radix_scratch& scratch,
                    simd_level level = detected_simd_level());

}  // namespace calserve::model::select
