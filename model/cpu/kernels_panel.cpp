// Panel-packed linear layer for short weight rows; see kernels.hpp (panel_matrix).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "model/cpu/kernels.hpp"

namespace calserve::model {
namespace {

constexpr std::int64_t k_lanes = 8;                   // rows per panel = FP32 lanes of a register
constexpr std::int64_t k_panel_tile_bytes = 96 << 10;  // panels revisited by every vector group stay in L2
constexpr int k_max_group = 6;                        // vectors per pass

template <bool Bf16>
inline __m256 load_panel(const void* base, std::int64_t off) {
    if constexpr (Bf16) {
        auto* p = static_cast<const std::uint16_t*>(base) + off;
        __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
        return _mm256_loadu_ps(static_cast<const float*>(base) + off);
    }
}

// P panels against G vectors: P x G accumulators, one FMA chain per (row, vector)
// running over the columns in order. The chain is the same whatever P and G are,
// so every output equals the same row and vector computed alone.
template <bool Bf16, int P, int G>
void panel_block(const void* data, std::int64_t panel0, std::int64_t cols, const float* x, std::int64_t ldx,
                 float* y, std::int64_t ldy, std::int64_t rows) {
    __m256 acc[P][G];
    for (int p = 0; p < P; ++p)
        for (int g = 0; g < G; ++g) acc[p][g] = _mm256_setzero_ps();
    const std::int64_t stride = cols * k_lanes;
    const std::int64_t base = panel0 * stride;
    for (std::int64_t k = 0; k < cols; ++k) {
        __m256 w[P];
        for (int p = 0; p < P; ++p) w[p] = load_panel<Bf16>(data, base + p * stride + k * k_lanes);
        for (int g = 0; g < G; ++g) {
            const __m256 xb = _mm256_broadcast_ss(x + g * ldx + k);
            for (int p = 0; p < P; ++p) acc[p][g] = _mm256_fmadd_ps(w[p], xb, acc[p][g]);
        }
    }
    for (int p = 0; p < P; ++p) {
        const std::int64_t r = (panel0 + p) * k_lanes;
        const std::int64_t live = std::min(k_lanes, rows - r);
        for (int g = 0; g < G; ++g) {
            float* out = y + g * ldy + r;
            if (live == k_lanes) {
                _mm256_storeu_ps(out, acc[p][g]);
            } else {
                alignas(32) float lanes[k_lanes];
                _mm256_store_ps(lanes, acc[p][g]);
                std::memcpy(out, lanes, static_cast<std::size_t>(live) * sizeof(float));
            }
        }
    }
}

// Panels per pass for a group of G vectors: enough independent chains to hide the
// FMA latency, few enough accumulators to stay in the 16 registers.
constexpr int panels_for(int g) { return g == 1 ? 6 : g == 2 ? 4 : g == 3 ? 3 : 2; }

template <bool Bf16, int G>
void panel_range(const void* data, std::int64_t p0, std::int64_t p1, std::int64_t cols, const float* x,
                 std::int64_t ldx, float* y, std::int64_t ldy, std::int64_t rows) {
    constexpr int P = panels_for(G);
    std::int64_t p = p0;
    for (; p + P <= p1; p += P) panel_block<Bf16, P, G>(data, p, cols, x, ldx, y, ldy, rows);
    for (; p < p1; ++p) panel_block<Bf16, 1, G>(data, p, cols, x, ldx, y, ldy, rows);
}

template <bool Bf16>
void panels_t(const panel_matrix& w, std::int64_t p0, std::int64_t p1, const float* x, std::int64_t nvec,
              std::int64_t ldx, float* y, std::int64_t ldy) {
    const void* data = Bf16 ? static_cast<const void*>(w.bf16.data()) : static_cast<const void*>(w.f32.data());
    const std::int64_t panel_bytes = w.cols * k_lanes * (Bf16 ? 2 : 4);
    const std::int64_t tile = std::max<std::int64_t>(1, k_panel_tile_bytes / std::max<std::int64_t>(1, panel_bytes));
    const std::int64_t groups = (nvec + k_max_group - 1) / k_max_group;
    for (std::int64_t t0 = p0; t0 < p1; t0 += tile) {
        const std::int64_t t1 = std::min(p1, t0 + tile);
        for (std::int64_t g = 0, v = 0; g < groups; ++g) {
            const std::int64_t count = (nvec - v + (groups - g) - 1) / (groups - g);  // balanced: 16 = 6 + 5 + 5
            const float* xv = x + v * ldx;
            float* yv = y + v * ldy;
            switch (count) {
                case 1: panel_range<Bf16, 1>(data, t0, t1, w.cols, xv, ldx, yv, ldy, w.rows); break;
                case 2: panel_range<Bf16, 2>(data, t0, t1, w.cols, xv, ldx, yv, ldy, w.rows); break;
                case 3: panel_range<Bf16, 3>(data, t0, t1, w.cols, xv, ldx, yv, ldy, w.rows); break;
                case 4: panel_range<Bf16, 4>(data, t0, t1, w.cols, xv, ldx, yv, ldy, w.rows); break;
                case 5: panel_range<Bf16, 5>(data, t0, t1, w.cols, xv, ldx, yv, ldy, w.rows); break;
                default: panel_range<Bf16, 6>(data, t0, t1, w.cols, xv, ldx, yv, ldy, w.rows); break;
            }
            v += count;
        }
    }
}

}  // namespace

panel_matrix panel_matrix::pack(const tensor_view& w) {
    panel_matrix m;
    // Q8_0 keeps its int8 kernel (the panels would hold dequantised weights).
    if (w.rows <= 0 || w.cols <= 0 || w.cols > k_panel_max_cols || w.type == dtype::q8_0) return m;
    m.rows = w.rows;
    m.cols = w.cols;
    const std::int64_t panels = (w.rows + k_lanes - 1) / k_lanes;
    const auto n = static_cast<std::size_t>(panels * w.cols * k_lanes);
    std::vector<float> row(static_cast<std::size_t>(w.cols));
    const bool bf16 = w.type == dtype::bf16;  // BF16 -> FP32 is exact: keep the smaller form
    if (bf16) m.bf16.assign(n, 0); else m.f32.assign(n, 0.0f);
    for (std::int64_t r = 0; r < w.rows; ++r) {
        const std::int64_t base = (r / k_lanes) * w.cols * k_lanes + r % k_lanes;
        if (bf16) {
            const auto* src = reinterpret_cast<const std::uint16_t*>(w.row(r));
            for (std::int64_t k = 0; k < w.cols; ++k) m.bf16[static_cast<std::size_t>(base + k * k_lanes)] = src[k];
        } else {
            convert_row_to_f32(w, r, row.data());
            for (std::int64_t k = 0; k < w.cols; ++k)
                m.f32[static_cast<std::size_t>(base + k * k_lanes)] = row[static_cast<std::size_t>(k)];
        }
    }
    return m;
}

void panel_rows_multi(const panel_matrix& w, std::int64_t p0, std::int64_t p1, const float* x, std::int64_t nvec,
                      std::int64_t ldx, float* y, std::int64_t ldy) {
    if (!w.bf16.empty()) return panels_t<true>(w, p0, p1, x, nvec, ldx, y, ldy);
    return panels_t<false>(w, p0, p1, x, nvec, ldx, y, ldy);
}

void linear_panels(thread_pool& pool, const panel_matrix& w, const float* x, std::int64_t t, std::int64_t ldx,
                   float* y, std::int64_t ldy) {
    if (t <= 0 || w.empty()) return;
    const std::int64_t panels = (w.rows + k_lanes - 1) / k_lanes;
    pool.parallel_for(panels, 16, w.rows * w.cols * t,
                      [&](std::int64_t b, std::int64_t e) { panel_rows_multi(w, b, e, x, t, ldx, y, ldy); });
}

}  // namespace calserve::model
