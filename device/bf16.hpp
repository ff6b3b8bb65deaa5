#pragma once
//! BF16 <-> FP32 for the device layer: the simulator writes logits as BF16 (what the
//! NPU returns) and the runner reads them back. Round to nearest, ties to even; NaN
//! stays a quiet NaN; BF16 -> FP32 is exact. Bulk conversions use model/'s AVX2
//! kernels (bit-identical to the scalar helpers here) when the buffer is aligned.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "model/core/bf16.hpp"

namespace calserve::device {

using bf16_bits = std::uint16_t;

constexpr float bf16_to_float(bf16_bits v) noexcept { return std::bit_cast<float>(static_cast<std::uint32_t>(v) << 16); }

constexpr bf16_bits float_to_bf16(float f) noexcept {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_bits>((u >> 16) | 0x0040u);
    return static_cast<bf16_bits>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Writes `in` as BF16 into `out` (2 bytes per value; out may be unaligned).
inline void store_bf16(std::span<const float> in, std::span<std::byte> out) {
    const std::size_t n = std::min(in.size(), out.size() / 2);
    if (reinterpret_cast<std::uintptr_t>(out.data()) % alignof(model::bf16) == 0) {
        model::f32_to_bf16(in.first(n), std::span(reinterpret_cast<model::bf16*>(out.data()), n));
        return;
    }
    for (std::size_t i = 0; i < in.size() && 2 * i + 1 < out.size(); ++i) {
        const bf16_bits b = float_to_bf16(in[i]);
        std::memcpy(out.data() + 2 * i, &b, sizeof b);
    }
}

// Reads BF16 bytes into FP32 (out.size() values).
inline void load_bf16(std::span<const std::byte> in, std::span<float> out) {
    const std::size_t n = std::min(out.size(), in.size() / 2);
    if (reinterpret_cast<std::uintptr_t>(in.data()) % alignof(model::bf16) == 0) {
        model::bf16_to_f32(std::span(reinterpret_cast<const model::bf16*>(in.data()), n), out.first(n));
        return;
    }
    for (std::size_t i = 0; i < out.size() && 2 * i + 1 < in.size(); ++i) {
        bf16_bits b;
        std::memcpy(&b, in.data() + 2 * i, sizeof b);
        out[i] = bf16_to_float(b);
    }
}

}  // namespace calserve::device
