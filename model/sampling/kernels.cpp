// Vocabulary-wide sampler passes over an FP32 row: the max scan and the exp weights
// (softmax numerators, with per-block sums). Scalar versions for the baseline ISA, AVX2
// versions with a target attribute (see model/core/bf16.cpp for why), picked by the
// caller's level. The BF16 row is in kernels_bf16.cpp, the top-p/top-k selection passes
// in kernels_select.cpp, the shared exp polynomial in kernels_internal.hpp.
#include "model/sampling/kernels.hpp"

#include <immintrin.h>

#include "config/invariant.hpp"
#include "model/sampling/kernels_internal.hpp"

namespace calserve::model::kernels {
namespace {

using detail::exp_nonpositive;
using detail::hsum;
using detail::neg_inf;
using detail::pos_inf;

// ---- scalar ----------------------------------------------------------------------

CALSERVE_BASELINE_KERNEL max_scan scan_max_scalar(const float* p, std::size_t n) {
    float best = neg_inf;
    bool finite = true;
    for (std::size_t i = 0; i < n; ++i) {
        const float v = p[i];
        if (!(v < pos_inf)) finite = false;  // NaN or +inf
        if (v > best) best = v;
    }
    return {best, finite};
}

CALSERVE_BASELINE_KERNEL weight_sum exp_weights_scalar(const float* p, std::size_t n, float max, float inv_t,
                                                    float* w, float* block_sums) {
    weight_sum out;
    for (std::size_t b = 0; b * weight_block < n; ++b) {
        const std::size_t end = (b + 1) * weight_block < n ? (b + 1) * weight_block : n;
        float sum = 0.0f;
        for (std::size_t i = b * weight_block; i < end; ++i) {
            const float x = __builtin_expf((p[i] - max) * inv_t);
            if (w != nullptr) w[i] = x;
            sum += x;
            out.positive += x > 0.0f ? 1 : 0;
        }
        if (block_sums != nullptr) block_sums[b] = sum;
        out.total += sum;
    }
    return out;
}

// ---- AVX2 ------------------------------------------------------------------------

CALSERVE_AVX2_ISA max_scan scan_max_avx2(const float* p, std::size_t n) {
    __m256 acc0 = _mm256_set1_ps(neg_inf);
    __m256 acc1 = acc0;
    __m256 bad = _mm256_setzero_ps();
    const __m256 inf = _mm256_set1_ps(pos_inf);
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 a = _mm256_loadu_ps(p + i);
        const __m256 b = _mm256_loadu_ps(p + i + 8);
        acc0 = _mm256_max_ps(a, acc0);  // a NaN in `a` yields acc0: NaN never becomes the max
        acc1 = _mm256_max_ps(b, acc1);
        bad = _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(a, inf, _CMP_NLT_UQ), _mm256_cmp_ps(b, inf, _CMP_NLT_UQ)));
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_max_ps(acc0, acc1));
    max_scan out = scan_max_scalar(p + i, n - i);
    for (float v : lanes) out.max = v > out.max ? v : out.max;
    out.finite = out.finite && _mm256_movemask_ps(bad) == 0;
    return out;
}

// One block: weights of [begin, end), padding a short last vector with -inf (weight 0)
// so every token goes through the same polynomial.
CALSERVE_AVX2_ISA float exp_block_avx2(const float* p, std::size_t begin, std::size_t end, __m256 max, __m256 inv_t,
                                       float* w, std::size_t& positive) {
    __m256 acc = _mm256_setzero_ps();
    for (std::size_t i = begin; i < end; i += 8) {
        __m256 l;
        if (i + 8 <= end) {
            l = _mm256_loadu_ps(p + i);
        } else {
            alignas(32) float pad[8];
            for (std::size_t j = 0; j < 8; ++j) pad[j] = i + j < end ? p[i + j] : neg_inf;
            l = _mm256_load_ps(pad);
        }
        const __m256 x = exp_nonpositive(_mm256_mul_ps(_mm256_sub_ps(l, max), inv_t));
        if (w != nullptr && i + 8 <= end) {
            _mm256_storeu_ps(w + i, x);
        } else if (w != nullptr) {
            alignas(32) float tmp[8];
            _mm256_store_ps(tmp, x);
            for (std::size_t j = 0; i + j < end; ++j) w[i + j] = tmp[j];
        }
        acc = _mm256_add_ps(acc, x);
        positive += static_cast<std::size_t>(
            __builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ)))));
    }
    return hsum(acc);
}

CALSERVE_AVX2_ISA weight_sum exp_weights_avx2(const float* p, std::size_t n, float max, float inv_t, float* w,
                                              float* block_sums) {
    weight_sum out;
    const __m256 vmax = _mm256_set1_ps(max);
    const __m256 vinv = _mm256_set1_ps(inv_t);
    for (std::size_t b = 0; b * weight_block < n; ++b) {
        const std::size_t end = (b + 1) * weight_block < n ? (b + 1) * weight_block : n;
        const float sum = exp_block_avx2(p, b * weight_block, end, vmax, vinv, w, out.positive);
        if (block_sums != nullptr) block_sums[b] = sum;
        out.total += sum;
    }
    return out;
}

}  // namespace

max_scan scan_max(std::span<const float> logits, simd_level level) {
    return usable_simd_level(level) == simd_level::avx2 ? scan_max_avx2(logits.data(), logits.size())
                                                        : scan_max_scalar(logits.data(), logits.size());
}

weight_sum exp_weights(std::span<const float> logits, float max, float inv_t, std::span<float> weights,
                       std::span<float> block_sums, simd_level level) {
    CALSERVE_INVARIANT(weights.size() >= logits.size() && block_sums.size() >= block_count(logits.size()),
                       "exp_weights: output spans too small");
    return usable_simd_level(level) == simd_level::avx2
               ? exp_weights_avx2(logits.data(), logits.size(), max, inv_t, weights.data(), block_sums.data())
               : exp_weights_scalar(logits.data(), logits.size(), max, inv_t, weights.data(), block_sums.data());
}

double exp_sum(std::span<const float> logits, float max, float inv_t, simd_level level) {
    return usable_simd_level(level) == simd_level::avx2
               ? exp_weights_avx2(logits.data(), logits.size(), max, inv_t, nullptr, nullptr).total
               : exp_weights_scalar(logits.data(), logits.size(), max, inv_t, nullptr, nullptr).total;
}

}  // namespace calserve::model::kernels
