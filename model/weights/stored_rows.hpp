#pragma once
//! Reading stored weight rows (F32, BF16, F16, Q8_0) as FP32, for the CPU kernels
//! and for the tools that convert checkpoints (GGUF writer, `checkpoint::vector_f32`).
//!
//! Role: the stored formats' one decoder. The inline AVX2 loads (`load8`, `load1`,
//! the Q8_0 block layout) are shared with the dot-product kernels in model/cpu/, so a
//! weight is read the same way whether it is converted or multiplied.
//!
//! Invariants: conversions are exact (BF16 and F16 widen to FP32 exactly; a Q8_0
//! weight is q * d with d the block's FP16 scale widened, one FP32 product).
//! Fault model: none; callers pass views the loader checked. Needs AVX2/F16C
//! (every model/ library is built with them).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "model/core/bf16.hpp"
#include "model/weights/weights.hpp"

namespace calserve::model {

// Converts rows [r0, r1) of `w` into a dense (r1-r0) x w.cols FP32 block.
void convert_rows_to_f32(const tensor_view& w, std::int64_t r0, std::int64_t r1, float* out);
inline void convert_row_to_f32(const tensor_view& w, std::int64_t r, float* out) {
    convert_rows_to_f32(w, r, r + 1, out);
}

namespace stored {

// Q8_0: blocks of 32 int8 weights after one FP16 scale (34 bytes a block).
constexpr std::int64_t q8_block = 32, q8_block_bytes = 34;

inline float q8_block_scale(const std::byte* blk) {
    std::uint16_t h;
    std::memcpy(&h, blk, 2);
    return _cvtsh_ss(h);
}

constexpr std::int64_t element_bytes(dtype t) { return t == dtype::f32 ? 4 : 2; }

// Loads 8 consecutive weights of dtype T (F32, BF16 or F16) as FP32 lanes.
template <dtype T>
inline __m256 load8(const std::byte* p) {
    if constexpr (T == dtype::f32) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    } else if constexpr (T == dtype::bf16) {
        __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
}

// Loads weight i of a row of dtype T as FP32.
template <dtype T>
inline float load1(const std::byte* p, std::int64_t i) {
    if constexpr (T == dtype::f32) {
        float v;
        std::memcpy(&v, p + i * 4, 4);
        return v;
    } else {
        std::uint16_t v;
        std::memcpy(&v, p + i * 2, 2);
        return T == dtype::bf16 ? bf16_to_f32(v) : _cvtsh_ss(v);
    }
}

// Sum of the 8 lanes of v: ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)), the order every
// kernel's horizontal reduction uses.
inline float hsum(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 0x55));
    return _mm_cvtss_f32(lo);
}

}  // namespace stored
}  // namespace calserve::model
