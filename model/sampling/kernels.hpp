#pragma once
//! Vocabulary-wide passes of the sampler (internal to model/sampling*.cpp, exposed for
//! tests and benchmarks): max scan with a NaN/+inf check, exp weights with per-block
//! sums, a strided "next element above a threshold" search, and the keep-mask pass.
//!
//! Each pass is one sweep over the logits with no allocation; AVX2 versions (built with
//! a target attribute) are chosen at run time as in model/core/bf16.hpp. The AVX2 exp is a
//! polynomial (relative error below 4e-7 against expf, tested), so the scalar and AVX2
//! paths agree closely but not bit for bit: a seeded request is reproducible on one
//! machine type, whatever the thread count.
//!
//! Invariants: weights are exp((l - max) * inv_temperature) in [0, 1] with the maximum
//! mapping to exactly 1; -inf logits give weight 0; block sums cover `weight_block`
//! consecutive tokens (the last block may be short).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "model/core/bf16.hpp"

namespace calserve::model::kernels {

inline constexpr std::size_t weight_block = 256;

constexpr std::size_t block_count(std::size_t n) { return (n + weight_block - 1) / weight_block; }

struct max_scan {
    float max;
    bool finite;  // no NaN and no +inf anywhere (-inf is allowed: a masked token)
};
max_scan scan_max(std::span<const float> logits, simd_level level);

struct weight_sum {
    double total = 0.0;
    std::size_t positive = 0;  // tokens with weight > 0
};
/// weights[i] = exp((logits[i] - max) * inv_t); block_sums[b] = sum of block b.
weight_sum exp_weights(std::span<const float> logits, float max, float inv_t, std::span<float> weights,
                       std::span<float> block_sums, simd_level level);
/// The BF16 row read directly (the top-p path with no penalty, bias or mask needs no FP32
/// copy): max and min of the values, and the same NaN/+inf check as scan_max.
struct bf16_scan {
    float max;
    float min;
    bool finite;
};
/// Also writes, per `weight_block` tokens, the largest order key (bf16_order_key) of the
/// block into `block_keys` (block_count(size) entries): next_above_bf16 skips blocks by them.
bf16_scan scan_max_bf16(std::span<const bf16> logits, std::span<std::int16_t> block_keys, simd_level level);

/// Integer key with the order of the BF16 values: +x -> its bits, -x -> minus its
/// magnitude (±0 share 0); NaN keys lie beyond the keys of ±inf.
constexpr std::int16_t bf16_order_key(bf16 v) {
    const auto magnitude = static_cast<std::int16_t>(v & 0x7fff);
    return (v & 0x8000) != 0 ? static_cast<std::int16_t>(-magnitude) : magnitude;
}

/// exp_weights of the FP32 conversion, bit for bit (same polynomial, same summation
/// order), read from the BF16 row; `min` (from scan_max_bf16) lets the AVX2 loop skip
/// the underflow clamp when no token can reach it. Wider vectors (AVX-512F, when the
/// CPU has it and `allow_avx512`) evaluate the same lanes: results do not change.
/// `positive` is not counted (0): the top-p path recounts in apply_keep_rule.
weight_sum exp_weights_bf16(std::span<const bf16> logits, float max, float min, float inv_t,
                            std::span<float> weights, std::span<float> block_sums, simd_level level,
                            bool allow_avx512 = true);

/// First index i >= from with bf16_to_f32(logits[i]) > threshold, or logits.size();
/// `threshold` must be -inf or a BF16 value, and the row free of NaN.
/// Blocks whose key in `block_keys` (from scan_max_bf16) is not above it are skipped whole.
std::size_t next_above_bf16(std::span<const bf16> logits, std::span<const std::int16_t> block_keys, std::size_t from,
                            float threshold, simd_level level);

/// Sum of exp((logits[i] - max) * inv_t) with nothing stored (logprob normaliser).
double exp_sum(std::span<const float> logits, float max, float inv_t, simd_level level);

/// First index i >= from with logits[i] > threshold, or logits.size().
std::size_t next_above(std::span<const float> logits, std::size_t from, float threshold, simd_level level);

/// A reusable list of token ids, sized once for a vocabulary (plus slack for 8-wide
/// stores) and never zero-filled again; `push_back` stays within that reservation.
class index_list {
public:
    void reserve_tokens(std::size_t n) {
        if (data_.size() < n + 8) data_.resize(n + 8);
    }
    std::uint32_t* data() { return data_.data(); }
    const std::uint32_t* begin() const { return data_.data(); }
    const std::uint32_t* end() const { return data_.data() + size_; }
    std::size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    std::uint32_t operator[](std::size_t i) const { return data_[i]; }
    void clear() { size_ = 0; }
    void set_size(std::size_t size) { size_ = size; }
    void push_back(std::uint32_t v) { data_[size_++] = v; }
    std::size_t capacity_bytes() const { return data_.capacity() * sizeof(std::uint32_t); }

private:
    std::vector<std::uint32_t> data_;
    std::size_t size_ = 0;
};

/// Fills `out` (reserved for weights.size() tokens) with every i such that
/// ((bits(w[i]) >> shift) & mask) == digit, ascending: the radix cutoff's vocabulary pass.
void collect_digit(std::span<const float> weights, int shift, std::uint32_t mask, std::uint32_t digit,
                   index_list& out, simd_level level);

/// Keep rule of the dense path: token i stays iff w >= w_min and (w, -i) >= (w_cut, -i_cut)
/// lexicographically (the top-p cutoff; pass w_cut = 0, i_cut = n for none). Others are set
/// to 0. Refreshes block_sums; returns the kept mass and count.
weight_sum apply_keep_rule(std::span<float> weights, float w_min, float w_cut, std::size_t i_cut,
                           std::span<float> block_sums, simd_level level);

}  // namespace calserve::model::kernels
