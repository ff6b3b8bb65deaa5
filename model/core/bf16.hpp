#pragma once
//! BF16 (and F16) <-> FP32 conversion and the fused BF16 argmax (the greedy fast path):
//! the project's one BF16 rounding; model/, device/ and the tools all use it.
//!
//! Role: the device returns logits as BF16 (151,936 x 2 B per token); the host
//! converts only what it needs. These are the kernels; model/sampling/sampling.hpp uses them.
//!
//! Dispatch: each kernel has a scalar and an AVX2 version, chosen at run time with
//! `__builtin_cpu_supports` (cached once). The scalar kernels and the CPU probe are
//! compiled for the x86-64 baseline ISA (SSE2) even though calserve_model is built with
//! -mavx2 (see bf16.cpp); the thin span wrappers still carry the library's flags, so a
//! pre-AVX2 host also needs that global option dropped (a build-wide decision). Both versions give bit-identical results (tested on all 65,536
//! patterns), so which one runs never changes a token.
//!
//! Invariants:
//!  - BF16 -> FP32 is exact (a BF16 is the top half of an FP32); NaN stays NaN.
//!  - FP32 -> BF16 rounds to nearest, ties to even; NaN becomes a quiet NaN with the
//!    same sign; values above the largest BF16 round to infinity as IEEE requires.
//!  - argmax: the lowest index of the maximum; NaN is never chosen; if no element is
//!    greater than -infinity the answer is 0. Empty input gives -1.
//! Fault model: span size mismatches are programming errors (CALSERVE_INVARIANT).
#include <bit>
#include <cstdint>
#include <span>

namespace calserve::model {

using bf16 = std::uint16_t;

enum class simd_level : std::uint8_t { scalar, avx2 };

/// The best level this CPU supports (checked once, then cached).
simd_level detected_simd_level();
/// `wanted` if this CPU supports it, else scalar (lets tests force a path safely).
simd_level usable_simd_level(simd_level wanted);
/// Whether this CPU has AVX-512F (checked once): kernels with an AVX-512 form that
/// gives the same bits as their AVX2 form use it then.
bool avx512_available();

constexpr float bf16_to_f32(bf16 v) noexcept { return std::bit_cast<float>(static_cast<std::uint32_t>(v) << 16); }

constexpr bf16 f32_to_bf16(float f) noexcept {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16>((u >> 16) | 0x0040u);  // quiet NaN
    const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return static_cast<bf16>((u + rounding) >> 16);
}

/// IEEE half precision: widening is exact; narrowing rounds to nearest even (F16C).
float f16_to_f32(std::uint16_t v);
std::uint16_t f32_to_f16(float v);

/// out[i] = bf16_to_f32(in[i]); sizes must match.
void bf16_to_f32(std::span<const bf16> in, std::span<float> out);
void bf16_to_f32(std::span<const bf16> in, std::span<float> out, simd_level level);

/// out[i] = f32_to_bf16(in[i]); sizes must match.
void f32_to_bf16(std::span<const float> in, std::span<bf16> out);
void f32_to_bf16(std::span<const float> in, std::span<bf16> out, simd_level level);

/// Fused conversion + argmax in one pass, no allocation (greedy decoding).
std::int32_t argmax_bf16(std::span<const bf16> logits);
std::int32_t argmax_bf16(std::span<const bf16> logits, simd_level level);

/// Same contract over FP32 (greedy after penalties).
std::int32_t argmax_f32(std::span<const float> logits);
std::int32_t argmax_f32(std::span<const float> logits, simd_level level);

}  // namespace calserve::model
