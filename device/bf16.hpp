#pragma once
//! BF16 byte buffers of the device layer: the simulator writes logits as BF16 (what
//! the NPU returns) and the runner reads them back. The rounding is model/core's, the
//! project's one (round to nearest, ties to even; NaN stays a quiet NaN; BF16 -> FP32
//! exact): these helpers only add what a device buffer needs, byte spans that may be
//! unaligned. Aligned buffers go through model/'s bulk kernels, unaligned ones through
//! its scalar functions, with the same bits either way.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "model/core/bf16.hpp"

namespace calserve::device {

// Writes `in` as BF16 into `out` (2 bytes per value; out may be unaligned).
inline void store_bf16(std::span<const float> in, std::span<std::byte> out) {
    const std::size_t n = std::min(in.size(), out.size() / 2);
    if (reinterpret_cast<std::uintptr_t>(out.data()) % alignof(model::bf16) == 0) {
        model::f32_to_bf16(in.first(n), std::span(reinterpret_cast<model::bf16*>(out.data()), n));
        return;
    }
    for (std::size_t i = 0; i < n; ++i) {
        const model::bf16 b = model::f32_to_bf16(in[i]);
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
    for (std::size_t i = 0; i < n; ++i) {
        model::bf16 b;
        std::memcpy(&b, in.data() + 2 * i, sizeof b);
        out[i] = model::bf16_to_f32(b);
    }
}

// Rounds FP32 values to BF16 precision in place (a reference then carries the
// device's output precision).
inline void round_to_bf16(std::span<float> values) {
    for (auto& v : values) v = model::bf16_to_f32(model::f32_to_bf16(v));
}

}  // namespace calserve::device
