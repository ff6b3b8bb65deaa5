// Sampler passes that read the BF16 logits row directly (the top-p path with no penalty,
// bias or mask needs no FP32 copy): max/min scan with per-block order keys, exp weights
// equal bit for bit to the FP32 path's (kernels.cpp), and the block-skipping "next
// above" search. Scalar for the baseline ISA, AVX2 (and AVX-512F for the exp loop)
// with target attributes; the shared exp polynomial is in kernels_internal.hpp.
#include "model/sampling/kernels.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "config/invariant.hpp"
#include "model/sampling/kernels_internal.hpp"

namespace calserve::model::kernels {
namespace {

using detail::exp_nonpositive;
using detail::exp_unclamped;
using detail::hsum;
using detail::neg_inf;
using detail::pos_inf;

// ---- scalar ----------------------------------------------------------------------

CALSERVE_BASELINE_ISA inline float bf16_value(const bf16* p, std::size_t i) {
    const std::uint32_t bits = static_cast<std::uint32_t>(p[i]) << 16;
    float v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
}

// bf16_order_key for the baseline kernels (a header function would carry the AVX2 flags).
CALSERVE_BASELINE_ISA inline std::int16_t order_key(bf16 v) {
    const auto magnitude = static_cast<std::int16_t>(v & 0x7fff);
    return (v & 0x8000) != 0 ? static_cast<std::int16_t>(-magnitude) : magnitude;
}

CALSERVE_BASELINE_KERNEL bf16_scan scan_max_bf16_scalar(const bf16* p, std::size_t n, std::int16_t* block_keys) {
    bf16_scan out{neg_inf, pos_inf, true};
    for (std::size_t b = 0; b * weight_block < n; ++b) {
        const std::size_t end = (b + 1) * weight_block < n ? (b + 1) * weight_block : n;
        std::int16_t key = std::numeric_limits<std::int16_t>::min();
        for (std::size_t i = b * weight_block; i < end; ++i) {
            const float v = bf16_value(p, i);
            if (!(v < pos_inf)) out.finite = false;  // NaN or +inf
            if (v > out.max) out.max = v;
            if (v < out.min) out.min = v;
            const std::int16_t k = order_key(p[i]);
            key = k > key ? k : key;
        }
        block_keys[b] = key;
    }
    return out;
}

// The scalar exp_weights loop over the converted values (positive not counted).
CALSERVE_BASELINE_KERNEL weight_sum exp_weights_bf16_scalar(const bf16* p, std::size_t n, float max, float inv_t,
                                                            float* w, float* block_sums) {
    weight_sum out;
    for (std::size_t b = 0; b * weight_block < n; ++b) {
        const std::size_t end = (b + 1) * weight_block < n ? (b + 1) * weight_block : n;
        float sum = 0.0f;
        for (std::size_t i = b * weight_block; i < end; ++i) {
            const float x = __builtin_expf((bf16_value(p, i) - max) * inv_t);
            w[i] = x;
            sum += x;
        }
        block_sums[b] = sum;
        out.total += sum;
    }
    return out;
}

// Within [from, end) only: the block-skipping loop is the dispatcher's.
CALSERVE_BASELINE_KERNEL std::size_t next_above_bf16_scalar(const bf16* p, std::size_t from, std::size_t end,
                                                            std::int16_t key) {
    for (std::size_t i = from; i < end; ++i) {
        if (order_key(p[i]) > key) return i;
    }
    return end;
}

// ---- BF16 row, AVX2 (and AVX-512F for the exp loop) -------------------------------

// Order-preserving 16-bit keys of sixteen BF16 values: +x -> bits, -x -> -magnitude
// (±0 share key 0); NaN keys lie beyond the keys of ±inf.
CALSERVE_AVX2_ISA inline __m256i bf16_keys16(const bf16* p) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm256_sign_epi16(_mm256_and_si256(x, _mm256_set1_epi16(0x7fff)), x);
}

constexpr int key_pos_inf = 0x7f80;

inline float key_value(int key) {
    const auto bits = static_cast<std::uint32_t>(key < 0 ? (0x8000 | -key) : key) << 16;
    float v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
}

CALSERVE_AVX2_ISA inline std::int16_t hmax_key(__m256i v) {
    const __m128i m = _mm_max_epi16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    // minpos finds an unsigned minimum: 0x7fff - x turns the signed maximum into it.
    const __m128i flipped = _mm_sub_epi16(_mm_set1_epi16(0x7fff), m);
    return static_cast<std::int16_t>(0x7fff - (_mm_cvtsi128_si32(_mm_minpos_epu16(flipped)) & 0xffff));
}

CALSERVE_AVX2_ISA bf16_scan scan_max_bf16_avx2(const bf16* p, std::size_t n, std::int16_t* block_keys) {
    __m256i hi = _mm256_set1_epi16(std::numeric_limits<std::int16_t>::min());
    __m256i lo = _mm256_set1_epi16(std::numeric_limits<std::int16_t>::max());
    const std::size_t full = n / weight_block;
    for (std::size_t b = 0; b < full; ++b) {
        const bf16* q = p + b * weight_block;
        __m256i bhi = bf16_keys16(q);
        __m256i blo = bhi;
        for (std::size_t j = 16; j < weight_block; j += 16) {
            const __m256i k = bf16_keys16(q + j);
            bhi = _mm256_max_epi16(bhi, k);
            blo = _mm256_min_epi16(blo, k);
        }
        block_keys[b] = hmax_key(bhi);
        hi = _mm256_max_epi16(hi, bhi);
        lo = _mm256_min_epi16(lo, blo);
    }
    const std::size_t i = full * weight_block;
    bf16_scan out = scan_max_bf16_scalar(p + i, n - i, block_keys + full);
    if (full == 0) return out;
    const int max_key = hmax_key(hi);
    const int min_key = -hmax_key(_mm256_sub_epi16(_mm256_setzero_si256(), lo));
    out.finite = out.finite && max_key < key_pos_inf && min_key >= -key_pos_inf;
    if (!out.finite) return out;
    const float vmax = key_value(max_key), vmin = key_value(min_key);
    out.max = vmax > out.max ? vmax : out.max;
    out.min = vmin < out.min ? vmin : out.min;
    return out;
}

CALSERVE_AVX2_ISA inline __m256 load_bf16x8(const bf16* p) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}


template <bool Clamp>
CALSERVE_AVX2_ISA inline __m256 exp_bf16x8(const bf16* p, __m256 max, __m256 inv_t) {
    const __m256 x = _mm256_mul_ps(_mm256_sub_ps(load_bf16x8(p), max), inv_t);
    return Clamp ? exp_nonpositive(x) : exp_unclamped(x);
}

// One block from `acc` on, in exp_block_avx2's order (one add per 8 tokens, in token
// order); a short last vector is padded with -inf through the clamped exp (weight 0).
template <bool Clamp>
CALSERVE_AVX2_ISA float exp_block_bf16_avx2(const bf16* p, std::size_t i, std::size_t end, __m256 acc, __m256 max,
                                            __m256 inv_t, float* w) {
    for (; i + 16 <= end; i += 16) {
        const __m256 x0 = exp_bf16x8<Clamp>(p + i, max, inv_t);
        const __m256 x1 = exp_bf16x8<Clamp>(p + i + 8, max, inv_t);
        _mm256_storeu_ps(w + i, x0);
        _mm256_storeu_ps(w + i + 8, x1);
        acc = _mm256_add_ps(_mm256_add_ps(acc, x0), x1);
    }
    if (i + 8 <= end) {
        const __m256 x = exp_bf16x8<Clamp>(p + i, max, inv_t);
        _mm256_storeu_ps(w + i, x);
        acc = _mm256_add_ps(acc, x);
        i += 8;
    }
    if (i < end) {
        alignas(32) float pad[8];
        for (std::size_t j = 0; j < 8; ++j) pad[j] = i + j < end ? bf16_value(p, i + j) : neg_inf;
        const __m256 x = exp_nonpositive(_mm256_mul_ps(_mm256_sub_ps(_mm256_load_ps(pad), max), inv_t));
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, x);
        for (std::size_t j = 0; i + j < end; ++j) w[i + j] = tmp[j];
        acc = _mm256_add_ps(acc, x);
    }
    return hsum(acc);
}

template <bool Clamp>
CALSERVE_AVX2_ISA weight_sum exp_weights_bf16_avx2(const bf16* p, std::size_t n, float max, float inv_t, float* w,
                                                   float* block_sums) {
    weight_sum out;
    const __m256 vmax = _mm256_set1_ps(max);
    const __m256 vinv = _mm256_set1_ps(inv_t);
    for (std::size_t b = 0; b * weight_block < n; ++b) {
        const std::size_t end = (b + 1) * weight_block < n ? (b + 1) * weight_block : n;
        const float sum = exp_block_bf16_avx2<Clamp>(p, b * weight_block, end, _mm256_setzero_ps(), vmax, vinv, w);
        block_sums[b] = sum;
        out.total += sum;
    }
    return out;
}

#define CALSERVE_AVX512_ISA __attribute__((target("avx512f,avx2,fma")))
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized inside their own set1/cast helpers
// (a known false positive); the AVX-512 section below keeps quiet about it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The same polynomial on sixteen lanes; every lane computes exactly what exp_nonpositive
// (Clamp) or exp_unclamped computes for it.
template <bool Clamp>
CALSERVE_AVX512_ISA inline __m512 exp_bf16x16(const bf16* p, __m512 max, __m512 inv_t) {
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    __m512 x = _mm512_mul_ps(_mm512_sub_ps(_mm512_castsi512_ps(_mm512_slli_epi32(u, 16)), max), inv_t);
    const __m512 lowest = _mm512_set1_ps(-87.33654f);
    const __mmask16 valid = Clamp ? _mm512_cmp_ps_mask(x, lowest, _CMP_GE_OQ) : __mmask16(0xffff);
    if (Clamp) x = _mm512_max_ps(x, lowest);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 poly = _mm512_set1_ps(1.9875691500e-4f);
    poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.3981999507e-3f));
    poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(8.3334519073e-3f));
    poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(4.1665795894e-2f));
    poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.6666665459e-1f));
    poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(5.0000001201e-1f));
    const __m512 y = _mm512_fmadd_ps(poly, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512i scale = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mov_ps(valid, _mm512_mul_ps(y, _mm512_castsi512_ps(scale)));
}

// Sixteen tokens per vector, but the sum still takes the low eight, then the high eight,
// into one eight-lane accumulator: the AVX2 order, so the block sums are identical.
template <bool Clamp>
CALSERVE_AVX512_ISA weight_sum exp_weights_bf16_avx512(const bf16* p, std::size_t n, float max, float inv_t,
                                                       float* w, float* block_sums) {
    weight_sum out;
    const __m512 vmax = _mm512_set1_ps(max);
    const __m512 vinv = _mm512_set1_ps(inv_t);
    for (std::size_t b = 0; b * weight_block < n; ++b) {
        const std::size_t begin = b * weight_block;
        const std::size_t end = begin + weight_block < n ? begin + weight_block : n;
        __m256 acc = _mm256_setzero_ps();
        std::size_t i = begin;
        for (; i + 16 <= end; i += 16) {
            const __m512 x = exp_bf16x16<Clamp>(p + i, vmax, vinv);
            _mm512_storeu_ps(w + i, x);
            acc = _mm256_add_ps(acc, _mm512_castps512_ps256(x));
            acc = _mm256_add_ps(acc, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
        }
        const float sum = exp_block_bf16_avx2<Clamp>(p, i, end, acc, _mm512_castps512_ps256(vmax),
                                                     _mm512_castps512_ps256(vinv), w);
        block_sums[b] = sum;
        out.total += sum;
    }
    return out;
}

#pragma GCC diagnostic pop

CALSERVE_AVX2_ISA std::size_t next_above_bf16_avx2(const bf16* p, std::size_t from, std::size_t end,
                                                   std::int16_t key) {
    const __m256i vt = _mm256_set1_epi16(key);
    std::size_t i = from;
    for (; i + 16 <= end; i += 16) {
        const auto bits = static_cast<unsigned>(_mm256_movemask_epi8(_mm256_cmpgt_epi16(bf16_keys16(p + i), vt)));
        if (bits != 0) return i + static_cast<std::size_t>(__builtin_ctz(bits)) / 2;
    }
    return next_above_bf16_scalar(p, i, end, key);
}

}  // namespace

bf16_scan scan_max_bf16(std::span<const bf16> logits, std::span<std::int16_t> block_keys, simd_level level) {
    CALSERVE_INVARIANT(block_keys.size() >= block_count(logits.size()), "scan_max_bf16: block_keys too small");
    return usable_simd_level(level) == simd_level::avx2
               ? scan_max_bf16_avx2(logits.data(), logits.size(), block_keys.data())
               : scan_max_bf16_scalar(logits.data(), logits.size(), block_keys.data());
}

weight_sum exp_weights_bf16(std::span<const bf16> logits, float max, float min, float inv_t, std::span<float> weights,
                            std::span<float> block_sums, simd_level level, bool allow_avx512) {
    CALSERVE_INVARIANT(weights.size() >= logits.size() && block_sums.size() >= block_count(logits.size()),
                       "exp_weights_bf16: output spans too small");
    const bf16* p = logits.data();
    const std::size_t n = logits.size();
    if (usable_simd_level(level) != simd_level::avx2) {
        return exp_weights_bf16_scalar(p, n, max, inv_t, weights.data(), block_sums.data());
    }
    // (l - max) * inv_t is monotone in l: when the smallest token stays above the clamp
    // bound, so does every token, and the clamp is the identity.
    const bool clamp = !((min - max) * inv_t >= -87.33654f);
    if (allow_avx512 && avx512_available()) {
        return clamp ? exp_weights_bf16_avx512<true>(p, n, max, inv_t, weights.data(), block_sums.data())
                     : exp_weights_bf16_avx512<false>(p, n, max, inv_t, weights.data(), block_sums.data());
    }
    return clamp ? exp_weights_bf16_avx2<true>(p, n, max, inv_t, weights.data(), block_sums.data())
                 : exp_weights_bf16_avx2<false>(p, n, max, inv_t, weights.data(), block_sums.data());
}

std::size_t next_above_bf16(std::span<const bf16> logits, std::span<const std::int16_t> block_keys, std::size_t from,
                            float threshold, simd_level level) {
    const std::size_t n = logits.size();
    CALSERVE_INVARIANT(block_keys.size() >= block_count(n), "next_above_bf16: block_keys too small");
    const std::int16_t key = bf16_order_key(f32_to_bf16(threshold));  // a BF16 value or -inf: exact
    const bool avx2 = usable_simd_level(level) == simd_level::avx2;
    for (std::size_t i = from; i < n;) {
        const std::size_t b = i / weight_block;
        const std::size_t end = std::min(n, (b + 1) * weight_block);
        if (block_keys[b] > key) {
            const std::size_t j = avx2 ? next_above_bf16_avx2(logits.data(), i, end, key)
                                       : next_above_bf16_scalar(logits.data(), i, end, key);
            if (j < end) return j;
        }
        i = end;
    }
    return n;
}

}  // namespace calserve::model::kernels
