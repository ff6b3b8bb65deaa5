// Vocabulary-wide sampler passes: scalar versions for the baseline ISA, AVX2 versions
// with a target attribute (see model/core/bf16.cpp for why), picked by the caller's level.
#include "model/sampling/kernels.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "config/invariant.hpp"

#define CALSERVE_BASELINE_ISA __attribute__((target("no-sse3,no-avx,no-avx2,no-fma,no-f16c")))
// Kernels are also noinline: inlined into an AVX2-compiled caller they would take its ISA.
#define CALSERVE_BASELINE_KERNEL __attribute__((target("no-sse3,no-avx,no-avx2,no-fma,no-f16c"), noinline))
#define CALSERVE_AVX2_ISA __attribute__((target("avx2,fma")))

namespace calserve::model::kernels {
namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();
constexpr float pos_inf = std::numeric_limits<float>::infinity();

// The vector exp of every width (AVX2, AVX-512), one set of constants: x = n ln2 + r
// with ln2 split in two (Cody-Waite: k_ln2_hi is exact in float), exp(r) = 1 + r +
// r^2 p(r) with p's coefficients in k_exp_poly (highest power first, Horner), and 2^n
// put into the exponent bits. Valid for x >= k_exp_lowest (the smallest normal's
// log), below which the result is 0.
constexpr float k_log2e = 1.44269504088896341f;
constexpr float k_ln2_hi = 0.693359375f;
constexpr float k_ln2_lo = -2.12194440e-4f;
constexpr float k_exp_poly[] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
constexpr float k_exp_lowest = -87.33654f;

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

// exp(x) for x >= k_exp_lowest (the polynomial above, on [-ln2/2, ln2/2]); exp(0) is exactly 1.
CALSERVE_AVX2_ISA inline __m256 exp_unclamped(__m256 x) {
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(k_log2e)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(k_ln2_hi), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(k_ln2_lo), r);
    __m256 poly = _mm256_set1_ps(k_exp_poly[0]);
    for (std::size_t k = 1; k < std::size(k_exp_poly); ++k)
        poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(k_exp_poly[k]));
    const __m256 y = _mm256_fmadd_ps(poly, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(scale));
}

// exp(x) for x <= 0 (and -inf): exp_unclamped on x clamped to its range; below the
// smallest normal the result is 0.
CALSERVE_AVX2_ISA inline __m256 exp_nonpositive(__m256 x) {
    const __m256 lowest = _mm256_set1_ps(k_exp_lowest);
    const __m256 valid = _mm256_cmp_ps(x, lowest, _CMP_GE_OQ);
    return _mm256_and_ps(exp_unclamped(_mm256_max_ps(x, lowest)), valid);
}

CALSERVE_AVX2_ISA inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
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
    const __m512 lowest = _mm512_set1_ps(k_exp_lowest);
    const __mmask16 valid = Clamp ? _mm512_cmp_ps_mask(x, lowest, _CMP_GE_OQ) : __mmask16(0xffff);
    if (Clamp) x = _mm512_max_ps(x, lowest);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(k_log2e)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(k_ln2_hi), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(k_ln2_lo), r);
    __m512 poly = _mm512_set1_ps(k_exp_poly[0]);
    for (std::size_t k = 1; k < std::size(k_exp_poly); ++k)
        poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(k_exp_poly[k]));
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
    const bool clamp = !((min - max) * inv_t >= k_exp_lowest);
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

double exp_sum(std::span<const float> logits, float max, float inv_t, simd_level level) {
    return usable_simd_level(level) == simd_level::avx2
               ? exp_weights_avx2(logits.data(), logits.size(), max, inv_t, nullptr, nullptr).total
               : exp_weights_scalar(logits.data(), logits.size(), max, inv_t, nullptr, nullptr).total;
}

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
