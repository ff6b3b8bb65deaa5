// BF16 kernels: scalar reference versions built for the x86-64 baseline ISA, AVX2
// versions built with a target attribute, and a run-time dispatcher.
//
// Why the attributes: calserve_model is compiled with -mavx2 -mfma -mf16c, so without
// them the "scalar" loops would be auto-vectorised into AVX2 and the fallback would
// fault on the CPUs it exists for. The scalar kernels and the dispatcher therefore use
// only raw pointers and builtins (no inline library calls, which carry the AVX2 flags).
#include "model/core/bf16.hpp"

#include <immintrin.h>

#include <cstring>
#include <limits>

#include "config/invariant.hpp"

#define CALSERVE_BASELINE_ISA __attribute__((target("no-sse3,no-avx,no-avx2,no-fma,no-f16c")))
// Kernels are also noinline: inlined into an AVX2-compiled caller they would take its ISA.
#define CALSERVE_BASELINE_KERNEL __attribute__((target("no-sse3,no-avx,no-avx2,no-fma,no-f16c"), noinline))
#define CALSERVE_AVX2_ISA __attribute__((target("avx2,fma")))

namespace calserve::model {
namespace {

// ---- scalar (baseline ISA) -------------------------------------------------------

CALSERVE_BASELINE_KERNEL void bf16_to_f32_scalar(const bf16* in, float* out, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
        const std::uint32_t bits = static_cast<std::uint32_t>(in[i]) << 16;
        std::memcpy(out + i, &bits, sizeof bits);
    }
}

CALSERVE_BASELINE_KERNEL void f32_to_bf16_scalar(const float* in, bf16* out, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
        std::uint32_t u;
        std::memcpy(&u, in + i, sizeof u);
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            out[i] = static_cast<bf16>((u >> 16) | 0x0040u);
        } else {
            out[i] = static_cast<bf16>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        }
    }
}

CALSERVE_BASELINE_KERNEL std::int32_t argmax_bf16_exact(const bf16* p, std::size_t n) {
    float best = -std::numeric_limits<float>::infinity();
    std::size_t best_i = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const std::uint32_t bits = static_cast<std::uint32_t>(p[i]) << 16;
        float v;
        std::memcpy(&v, &bits, sizeof v);
        if (v > best) {
            best = v;
            best_i = i;
        }
    }
    return static_cast<std::int32_t>(best_i);
}

// Order-preserving 16-bit key of a BF16: +x -> bits, -x -> -magnitude, so ±0 share
// key 0 and integer order equals float order for every non-NaN value. Positive NaN
// keys exceed +inf's (0x7f80) and are detected; negative NaN keys sort below -inf.
constexpr std::int16_t key_neg_inf = -0x7f80;
constexpr std::int16_t key_pos_inf = 0x7f80;

CALSERVE_BASELINE_ISA inline std::int16_t bf16_key(bf16 v) {
    const auto mag = static_cast<std::int16_t>(v & 0x7fff);
    return (v & 0x8000) ? static_cast<std::int16_t>(-mag) : mag;
}

constexpr std::size_t argmax_block = 256;

// Shared end of both block-max argmax kernels: the first index of `best_key` inside
// the first block holding it, then the tail; NaN and all -inf handled as the contract says.
CALSERVE_BASELINE_KERNEL std::int32_t finish_argmax(const bf16* p, std::size_t n, std::size_t tail, std::int16_t best_key,
                                                 std::size_t best_block) {
    std::size_t best_i = n;  // none yet
    for (std::size_t j = best_block; j < best_block + argmax_block && j < tail; ++j) {
        if (bf16_key(p[j]) == best_key) {
            best_i = j;
            break;
        }
    }
    for (std::size_t i = tail; i < n; ++i) {  // strictly greater keeps the lower index
        const std::int16_t k = bf16_key(p[i]);
        if (k > best_key) {
            best_key = k;
            best_i = i;
        }
    }
    if (best_key > key_pos_inf) return argmax_bf16_exact(p, n);  // a positive NaN: rare, exact path
    if (best_key <= key_neg_inf || best_i == n) return 0;
    return static_cast<std::int32_t>(best_i);
}

// Scalar block maxima over the integer keys: branch-free, so even SSE2 code runs
// near bandwidth, unlike a compare-and-branch float loop.
CALSERVE_BASELINE_KERNEL std::int32_t argmax_bf16_scalar(const bf16* p, std::size_t n) {
    std::int16_t best_key = std::numeric_limits<std::int16_t>::min();
    std::size_t best_block = 0;
    std::size_t i = 0;
    for (; i + argmax_block <= n; i += argmax_block) {
        std::int16_t m = std::numeric_limits<std::int16_t>::min();
        for (std::size_t j = 0; j < argmax_block; ++j) {
            const std::int16_t k = bf16_key(p[i + j]);
            m = k > m ? k : m;
        }
        if (m > best_key) {
            best_key = m;
            best_block = i;
        }
    }
    return finish_argmax(p, n, i, best_key, best_block);
}

CALSERVE_BASELINE_KERNEL std::int32_t argmax_f32_scalar(const float* p, std::size_t n) {
    float best = -std::numeric_limits<float>::infinity();
    std::size_t best_i = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (p[i] > best) {
            best = p[i];
            best_i = i;
        }
    }
    return static_cast<std::int32_t>(best_i);
}

// ---- AVX2 ------------------------------------------------------------------------

CALSERVE_AVX2_ISA void bf16_to_f32_avx2(const bf16* in, float* out, std::size_t n) {
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i a = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
        const __m256i b = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 8)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_slli_epi32(a, 16));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + 8), _mm256_slli_epi32(b, 16));
    }
    for (; i < n; ++i) {
        const std::uint32_t bits = static_cast<std::uint32_t>(in[i]) << 16;
        std::memcpy(out + i, &bits, sizeof bits);
    }
}

CALSERVE_AVX2_ISA inline __m256i round_to_bf16_lanes(__m256i u) {
    const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x0040));
    return _mm256_blendv_epi8(rounded, quiet, is_nan);
}

CALSERVE_AVX2_ISA void f32_to_bf16_avx2(const float* in, bf16* out, std::size_t n) {
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i a = round_to_bf16_lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
        const __m256i b = round_to_bf16_lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 8)));
        // packus interleaves 128-bit lanes: [a0..3 b0..3 a4..7 b4..7]; restore order.
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
    }
    f32_to_bf16_scalar(in + i, out + i, n - i);
}

CALSERVE_AVX2_ISA inline __m256i bf16_keys(const bf16* p) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm256_sign_epi16(_mm256_and_si256(x, _mm256_set1_epi16(0x7fff)), x);
}

CALSERVE_AVX2_ISA inline std::int16_t hmax_epi16(__m256i v) {
    __m128i m = _mm_max_epi16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    // minpos works on unsigned minima: 0x7fff - x maps signed max to unsigned min.
    const __m128i flipped = _mm_sub_epi16(_mm_set1_epi16(0x7fff), m);
    const int min_u = _mm_cvtsi128_si32(_mm_minpos_epu16(flipped)) & 0xffff;
    return static_cast<std::int16_t>(0x7fff - min_u);
}

// One pass at load bandwidth: per 256-element block the max key, remembering the
// first block that holds the overall maximum; then the first match inside it.
CALSERVE_AVX2_ISA std::int32_t argmax_bf16_avx2(const bf16* p, std::size_t n) {
    std::int16_t best_key = std::numeric_limits<std::int16_t>::min();
    std::size_t best_block = 0;
    std::size_t i = 0;
    for (; i + argmax_block <= n; i += argmax_block) {
        __m256i acc0 = bf16_keys(p + i);
        __m256i acc1 = bf16_keys(p + i + 16);
        for (std::size_t j = 32; j < argmax_block; j += 32) {
            acc0 = _mm256_max_epi16(acc0, bf16_keys(p + i + j));
            acc1 = _mm256_max_epi16(acc1, bf16_keys(p + i + j + 16));
        }
        const std::int16_t m = hmax_epi16(_mm256_max_epi16(acc0, acc1));
        if (m > best_key) {
            best_key = m;
            best_block = i;
        }
    }
    return finish_argmax(p, n, i, best_key, best_block);
}

CALSERVE_AVX2_ISA std::int32_t argmax_f32_avx2(const float* p, std::size_t n) {
    constexpr std::size_t block = 256;
    const float neg_inf = -std::numeric_limits<float>::infinity();
    float best = neg_inf;
    std::size_t best_block = 0;
    std::size_t i = 0;
    for (; i + block <= n; i += block) {
        __m256 acc[4] = {_mm256_set1_ps(neg_inf), _mm256_set1_ps(neg_inf), _mm256_set1_ps(neg_inf),
                         _mm256_set1_ps(neg_inf)};
        for (std::size_t j = 0; j < block; j += 32) {
            for (int k = 0; k < 4; ++k) acc[k] = _mm256_max_ps(_mm256_loadu_ps(p + i + j + 8 * k), acc[k]);  // NaN in the load is dropped
        }
        const __m256 m8 = _mm256_max_ps(_mm256_max_ps(acc[0], acc[1]), _mm256_max_ps(acc[2], acc[3]));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        const float m = _mm_cvtss_f32(m4);
        if (m > best) {
            best = m;
            best_block = i;
        }
    }
    std::size_t best_i = 0;
    if (best > neg_inf) {
        for (std::size_t j = best_block; j < best_block + block; ++j) {
            if (p[j] == best) {
                best_i = j;
                break;
            }
        }
    }
    for (; i < n; ++i) {
        if (p[i] > best) {
            best = p[i];
            best_i = i;
        }
    }
    return static_cast<std::int32_t>(best_i);
}

}  // namespace

namespace {
CALSERVE_BASELINE_KERNEL simd_level probe_cpu() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? simd_level::avx2 : simd_level::scalar;
}
}  // namespace

simd_level detected_simd_level() {
    static const simd_level level = probe_cpu();
    return level;
}

namespace {
CALSERVE_BASELINE_KERNEL bool probe_avx512() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}
}  // namespace

bool avx512_available() {
    static const bool available = probe_avx512();
    return available;
}

// F16 uses the F16C instructions (every model/ library is built with -mf16c, as the
// weight kernels that read F16 checkpoints need).
float f16_to_f32(std::uint16_t v) { return _cvtsh_ss(v); }
std::uint16_t f32_to_f16(float v) { return _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT); }

simd_level usable_simd_level(simd_level wanted) {
    return wanted == simd_level::avx2 && detected_simd_level() != simd_level::avx2 ? simd_level::scalar : wanted;
}

void bf16_to_f32(std::span<const bf16> in, std::span<float> out) { bf16_to_f32(in, out, detected_simd_level()); }

void bf16_to_f32(std::span<const bf16> in, std::span<float> out, simd_level level) {
    CALSERVE_INVARIANT(in.size() == out.size(), "bf16_to_f32: size mismatch");
    if (usable_simd_level(level) == simd_level::avx2) {
        bf16_to_f32_avx2(in.data(), out.data(), in.size());
    } else {
        bf16_to_f32_scalar(in.data(), out.data(), in.size());
    }
}

void f32_to_bf16(std::span<const float> in, std::span<bf16> out) { f32_to_bf16(in, out, detected_simd_level()); }

void f32_to_bf16(std::span<const float> in, std::span<bf16> out, simd_level level) {
    CALSERVE_INVARIANT(in.size() == out.size(), "f32_to_bf16: size mismatch");
    if (usable_simd_level(level) == simd_level::avx2) {
        f32_to_bf16_avx2(in.data(), out.data(), in.size());
    } else {
        f32_to_bf16_scalar(in.data(), out.data(), in.size());
    }
}

std::int32_t argmax_bf16(std::span<const bf16> logits) { return argmax_bf16(logits, detected_simd_level()); }

std::int32_t argmax_bf16(std::span<const bf16> logits, simd_level level) {
    if (logits.empty()) return -1;
    return usable_simd_level(level) == simd_level::avx2 ? argmax_bf16_avx2(logits.data(), logits.size())
                                                        : argmax_bf16_scalar(logits.data(), logits.size());
}

std::int32_t argmax_f32(std::span<const float> logits) { return argmax_f32(logits, detected_simd_level()); }

std::int32_t argmax_f32(std::span<const float> logits, simd_level level) {
    if (logits.empty()) return -1;
    return usable_simd_level(level) == simd_level::avx2 ? argmax_f32_avx2(logits.data(), logits.size())
                                                        : argmax_f32_scalar(logits.data(), logits.size());
}

}  // namespace calserve::model
