// Sampler passes that select tokens over an FP32 row of logits or weights: the "next
// element above a threshold" search (top-p cutoff), the keep-mask pass, and the radix
// digit collection (top-k). Scalar versions for the baseline ISA, AVX2 versions with a
// target attribute (see model/core/bf16.cpp for why), picked by the caller's level.
#include "model/sampling/kernels.hpp"

#include <immintrin.h>

#include <cstring>

#include "config/invariant.hpp"
#include "model/sampling/kernels_internal.hpp"

namespace calserve::model::kernels {
namespace {

using detail::hsum;

// ---- scalar ----------------------------------------------------------------------

CALSERVE_BASELINE_KERNEL std::size_t next_above_scalar(const float* p, std::size_t n, std::size_t from, float t) {
    for (std::size_t i = from; i < n; ++i) {
        if (p[i] > t) return i;
    }
    return n;
}

CALSERVE_BASELINE_KERNEL weight_sum apply_keep_rule_scalar(float* w, std::size_t n, float w_min, float w_cut,
                                                        std::size_t i_cut, float* block_sums) {
    weight_sum out;
    for (std::size_t b = 0; b * weight_block < n; ++b) {
        const std::size_t end = (b + 1) * weight_block < n ? (b + 1) * weight_block : n;
        float sum = 0.0f;
        for (std::size_t i = b * weight_block; i < end; ++i) {
            const float x = w[i];
            const bool keep = x >= w_min && (x > w_cut || (x == w_cut && i <= i_cut));
            w[i] = keep ? x : 0.0f;
            sum += w[i];
            out.positive += w[i] > 0.0f ? 1 : 0;
        }
        block_sums[b] = sum;
        out.total += sum;
    }
    return out;
}

// Shared by both paths for the last partial vector (and the whole scalar path):
// appends matches at dst[size...] and returns the new size.
CALSERVE_BASELINE_KERNEL std::size_t collect_digit_scalar(const float* w, std::size_t from, std::size_t n, int shift,
                                                          std::uint32_t mask, std::uint32_t digit, std::uint32_t* dst,
                                                          std::size_t size) {
    for (std::size_t i = from; i < n; ++i) {
        std::uint32_t key;
        std::memcpy(&key, w + i, sizeof key);
        if (((key >> shift) & mask) == digit) dst[size++] = static_cast<std::uint32_t>(i);
    }
    return size;
}

// ---- AVX2 ------------------------------------------------------------------------

CALSERVE_AVX2_ISA std::size_t next_above_avx2(const float* p, std::size_t n, std::size_t from, float t) {
    const __m256 vt = _mm256_set1_ps(t);
    std::size_t i = from;
    for (; i + 32 <= n; i += 32) {
        const __m256 c0 = _mm256_cmp_ps(_mm256_loadu_ps(p + i), vt, _CMP_GT_OQ);
        const __m256 c1 = _mm256_cmp_ps(_mm256_loadu_ps(p + i + 8), vt, _CMP_GT_OQ);
        const __m256 c2 = _mm256_cmp_ps(_mm256_loadu_ps(p + i + 16), vt, _CMP_GT_OQ);
        const __m256 c3 = _mm256_cmp_ps(_mm256_loadu_ps(p + i + 24), vt, _CMP_GT_OQ);
        const __m256 any = _mm256_or_ps(_mm256_or_ps(c0, c1), _mm256_or_ps(c2, c3));
        if (_mm256_movemask_ps(any) != 0) break;
    }
    return next_above_scalar(p, n, i, t);
}

// Same rule as the scalar loop, eight tokens at a time; the index test only matters
// for tokens whose weight equals the cutoff weight.
CALSERVE_AVX2_ISA weight_sum apply_keep_rule_avx2(float* w, std::size_t n, float w_min, float w_cut,
                                                  std::size_t i_cut, float* block_sums) {
    weight_sum out;
    const __m256 vmin = _mm256_set1_ps(w_min);
    const __m256 vcut = _mm256_set1_ps(w_cut);
    const __m256 zero = _mm256_setzero_ps();
    const auto cut_index = static_cast<std::int32_t>(i_cut < 0x7fffffffu ? i_cut : 0x7fffffffu);
    const __m256i vicut = _mm256_set1_epi32(cut_index);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (std::size_t b = 0; b * weight_block < n; ++b) {
        const std::size_t begin = b * weight_block;
        const std::size_t end = begin + weight_block < n ? begin + weight_block : n;
        __m256 acc = zero;
        std::size_t i = begin;
        for (; i + 8 <= end; i += 8) {
            const __m256 x = _mm256_loadu_ps(w + i);
            const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(static_cast<std::int32_t>(i)), lane);
            const __m256 index_past = _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, vicut));
            const __m256 above = _mm256_or_ps(_mm256_cmp_ps(x, vcut, _CMP_GT_OQ),
                                              _mm256_andnot_ps(index_past, _mm256_cmp_ps(x, vcut, _CMP_EQ_OQ)));
            const __m256 keep = _mm256_and_ps(_mm256_cmp_ps(x, vmin, _CMP_GE_OQ), above);
            const __m256 kept = _mm256_and_ps(x, keep);
            _mm256_storeu_ps(w + i, kept);
            acc = _mm256_add_ps(acc, kept);
            out.positive += static_cast<std::size_t>(
                __builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(kept, zero, _CMP_GT_OQ)))));
        }
        float sum = hsum(acc);
        for (; i < end; ++i) {
            const float x = w[i];
            const bool keep = x >= w_min && (x > w_cut || (x == w_cut && i <= i_cut));
            w[i] = keep ? x : 0.0f;
            sum += w[i];
            out.positive += w[i] > 0.0f ? 1 : 0;
        }
        block_sums[b] = sum;
        out.total += sum;
    }
    return out;
}

// Left-packing table: for each 8-bit mask, the lanes whose bit is set, in order.
struct pack_table {
    std::uint32_t lanes[256][8];
};
constexpr pack_table make_pack_table() {
    pack_table t{};
    for (unsigned m = 0; m < 256; ++m) {
        unsigned c = 0;
        for (unsigned b = 0; b < 8; ++b) {
            if ((m >> b) & 1u) t.lanes[m][c++] = b;
        }
    }
    return t;
}
alignas(32) constexpr pack_table pack = make_pack_table();

// Branch-free stream compaction: every vector stores its matching ids left-packed at
// the end of the list (8-wide store; the list has 8 slots of slack) and advances by the
// match count, so a boundary bucket holding a fifth of the vocabulary costs no mispredicts.
CALSERVE_AVX2_ISA std::size_t collect_digit_avx2(const float* w, std::size_t n, int shift, std::uint32_t mask,
                                                 std::uint32_t digit, std::uint32_t* dst) {
    const __m128i count = _mm_cvtsi32_si128(shift);
    const __m256i vmask = _mm256_set1_epi32(static_cast<int>(mask));
    const __m256i vdigit = _mm256_set1_epi32(static_cast<int>(digit));
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    std::size_t size = 0;
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i keys = _mm256_castps_si256(_mm256_loadu_ps(w + i));
        const __m256i d = _mm256_and_si256(_mm256_srl_epi32(keys, count), vmask);
        const auto bits = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(d, vdigit))));
        const __m256i ids = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(i)), lane);
        const __m256i perm = _mm256_load_si256(reinterpret_cast<const __m256i*>(pack.lanes[bits]));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + size), _mm256_permutevar8x32_epi32(ids, perm));
        size += static_cast<std::size_t>(__builtin_popcount(bits));
    }
    return collect_digit_scalar(w, i, n, shift, mask, digit, dst, size);
}

}  // namespace

std::size_t next_above(std::span<const float> logits, std::size_t from, float threshold, simd_level level) {
    if (from >= logits.size()) return logits.size();
    return usable_simd_level(level) == simd_level::avx2 ? next_above_avx2(logits.data(), logits.size(), from, threshold)
                                                        : next_above_scalar(logits.data(), logits.size(), from, threshold);
}

void collect_digit(std::span<const float> weights, int shift, std::uint32_t mask, std::uint32_t digit,
                   index_list& out, simd_level level) {
    out.reserve_tokens(weights.size());
    const std::size_t size =
        usable_simd_level(level) == simd_level::avx2
            ? collect_digit_avx2(weights.data(), weights.size(), shift, mask, digit, out.data())
            : collect_digit_scalar(weights.data(), 0, weights.size(), shift, mask, digit, out.data(), 0);
    out.set_size(size);
}

weight_sum apply_keep_rule(std::span<float> weights, float w_min, float w_cut, std::size_t i_cut,
                           std::span<float> block_sums, simd_level level) {
    CALSERVE_INVARIANT(block_sums.size() >= block_count(weights.size()), "apply_keep_rule: block_sums too small");
    CALSERVE_INVARIANT(weights.size() < 0x7fffffffu, "apply_keep_rule: vocabulary too large");
    return usable_simd_level(level) == simd_level::avx2
               ? apply_keep_rule_avx2(weights.data(), weights.size(), w_min, w_cut, i_cut, block_sums.data())
               : apply_keep_rule_scalar(weights.data(), weights.size(), w_min, w_cut, i_cut, block_sums.data());
}

}  // namespace calserve::model::kernels

