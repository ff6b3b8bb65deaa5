#pragma once
//! Shared by the sampler's kernel sources (kernels.cpp: the FP32 row's max scan and exp
//! weights; kernels_bf16.cpp: the BF16 row; kernels_select.cpp: the top-p cutoff search,
//! keep mask and top-k digit passes): the ISA attributes and the AVX2 exp polynomial.
//!
//! Baseline kernels are built for the baseline ISA although the library is built with
//! -mavx2 (see model/core/bf16.cpp for why); AVX2 kernels carry a target attribute.
//! The FP32 and BF16 paths both take the exp polynomial from here, so they compute the
//! same lanes bit for bit (the AVX-512 loop in kernels_bf16.cpp repeats it on sixteen
//! lanes, operation for operation).
#include <immintrin.h>

#include <limits>

#include "model/sampling/kernels.hpp"

#define CALSERVE_BASELINE_ISA __attribute__((target("no-sse3,no-avx,no-avx2,no-fma,no-f16c")))
// Kernels are also noinline: inlined into an AVX2-compiled caller they would take its ISA.
#define CALSERVE_BASELINE_KERNEL __attribute__((target("no-sse3,no-avx,no-avx2,no-fma,no-f16c"), noinline))
#define CALSERVE_AVX2_ISA __attribute__((target("avx2,fma")))

namespace calserve::model::kernels::detail {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();
constexpr float pos_inf = std::numeric_limits<float>::infinity();

// exp(x) for x >= -87.33654 (the smallest normal's log): Cody-Waite reduction by ln 2 and a
// degree-6 polynomial on [-ln2/2, ln2/2]; exp(0) is exactly 1.
CALSERVE_AVX2_ISA inline __m256 exp_unclamped(__m256 x) {
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 poly = _mm256_set1_ps(1.9875691500e-4f);
    poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.3981999507e-3f));
    poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(8.3334519073e-3f));
    poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(4.1665795894e-2f));
    poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.6666665459e-1f));
    poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(5.0000001201e-1f));
    const __m256 y = _mm256_fmadd_ps(poly, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(scale));
}

// exp(x) for x <= 0 (and -inf): exp_unclamped on x clamped to its range; below the
// smallest normal the result is 0.
CALSERVE_AVX2_ISA inline __m256 exp_nonpositive(__m256 x) {
    const __m256 lowest = _mm256_set1_ps(-87.33654f);
    const __m256 valid = _mm256_cmp_ps(x, lowest, _CMP_GE_OQ);
    return _mm256_and_ps(exp_unclamped(_mm256_max_ps(x, lowest)), valid);
}

CALSERVE_AVX2_ISA inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

}  // namespace calserve::model::kernels::detail
