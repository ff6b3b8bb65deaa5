// AVX2/FMA dot-product and element-wise kernels; see kernels.hpp.
#include "model/cpu/kernels.hpp"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/core/bf16.hpp"
#include "model/weights/stored_rows.hpp"

namespace calserve::model {
namespace {

using stored::hsum;
using stored::load1;
using stored::load8;

constexpr std::int64_t esize(dtype t) { return stored::element_bytes(t); }

// The one summation order every weight-row dot product uses: four accumulators
// over 32-element chunks, the 8-element tail into the first, then
// (a0 + a1) + (a2 + a3) reduced across lanes, then the scalar tail. `dot_group_t`
// runs it for NV activation vectors against each weight row (the row's chunks are
// loaded once and used NV times); each vector's sum takes exactly the steps it
// would take alone, so y does not depend on NV or on the other vectors: a batch
// row's logits equal that row decoded alone, bit for bit.
template <dtype T, int NV>
void dot_group_t(const tensor_view& w, std::int64_t r0, std::int64_t r1, const float* x, std::int64_t ldx, float* y,
                 std::int64_t ldy) {
    const std::int64_t n = w.cols, n32 = n & ~std::int64_t{31}, n8 = n & ~std::int64_t{7};
    constexpr std::int64_t es = esize(T);
    for (std::int64_t r = r0; r < r1; ++r) {
        const std::byte* p = w.row(r);
        __m256 acc[NV][4];
        for (int v = 0; v < NV; ++v)
            for (int a = 0; a < 4; ++a) acc[v][a] = _mm256_setzero_ps();
        std::int64_t k = 0;
        for (; k < n32; k += 32)
            for (int a = 0; a < 4; ++a) {
                const std::int64_t kk = k + 8 * a;
                const __m256 wv = load8<T>(p + kk * es);
                for (int v = 0; v < NV; ++v) acc[v][a] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + v * ldx + kk), acc[v][a]);
            }
        for (; k < n8; k += 8) {
            const __m256 wv = load8<T>(p + k * es);
            for (int v = 0; v < NV; ++v) acc[v][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + v * ldx + k), acc[v][0]);
        }
        for (int v = 0; v < NV; ++v) {
            float s = hsum(_mm256_add_ps(_mm256_add_ps(acc[v][0], acc[v][1]), _mm256_add_ps(acc[v][2], acc[v][3])));
            // std::fma, not `s += w * x`: whether the compiler contracts that may differ per instantiation.
            for (std::int64_t kk = k; kk < n; ++kk) s = std::fma(load1<T>(p, kk), x[v * ldx + kk], s);
            y[v * ldy + (r - r0)] = s;
        }
    }
}

#define CALSERVE_AVX512_ISA __attribute__((target("avx512f,avx2,fma")))
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized inside their own helpers (a
// known false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

CALSERVE_AVX512_ISA inline __m512 load16_bf16(const std::byte* p) {
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}

CALSERVE_AVX512_ISA inline __m256 high_half(__m512 v) {
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

// The weight stream runs this far ahead of the multiply-adds, one line per 32 weights.
// With several vectors the loop is busy with activation loads and FMAs, and the
// hardware prefetcher alone left the stream and the arithmetic mostly serial.
// Prefetches never fault, so running past the rows of this call is harmless.
constexpr std::int64_t k_prefetch_bytes = 4096;
// Several vectors (dot_block_bf16_avx512 streaming): twice the lead, into L2, so the
// lines arrive while the FMAs run (batch 4 / 8 decode in the fp32 mode 1.2-1.3x steps
// per CPU-second, A/B/A/B at load average 8-9). One vector keeps `prefetcht0`: into L2
// it ran 0.88-0.90x as fast.
constexpr std::int64_t k_batch_prefetch_bytes = 8192;

// dot_group_t<bf16, NV> on sixteen lanes. Lanes 0-7 of z[v][0] are the AVX2 kernel's
// acc[v][0] and lanes 8-15 its acc[v][1] (z[v][1]: acc[v][2], acc[v][3]), so every
// lane runs the FMA chain it runs there and the reduction takes the same steps: the
// results are equal bit for bit. With 32 registers the accumulators of four vectors
// never spill, which the AVX2 kernel's sixteen make it do (B4 decode ~1.2x faster).
// Two weight rows per pass, sharing each activation load: no faster from L2, slower
// from memory (measured with aligned buffers).
template <int NV>
CALSERVE_AVX512_ISA void dot_group_bf16_avx512(const tensor_view& w, std::int64_t r0, std::int64_t r1, const float* x,
                                               std::int64_t ldx, float* y, std::int64_t ldy) {
    const std::int64_t n = w.cols, n32 = n & ~std::int64_t{31}, n8 = n & ~std::int64_t{7};
    for (std::int64_t r = r0; r < r1; ++r) {
        const std::byte* p = w.row(r);
        __m512 z[NV][2];
        for (int v = 0; v < NV; ++v) z[v][0] = z[v][1] = _mm512_setzero_ps();
        std::int64_t k = 0;
        for (; k < n32; k += 32) {
            _mm_prefetch(reinterpret_cast<const char*>(p + k * 2 + k_prefetch_bytes), _MM_HINT_T0);
            const __m512 w0 = load16_bf16(p + k * 2);
            const __m512 w1 = load16_bf16(p + (k + 16) * 2);
            for (int v = 0; v < NV; ++v) {
                z[v][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + v * ldx + k), z[v][0]);
                z[v][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + v * ldx + k + 16), z[v][1]);
            }
        }
        for (int v = 0; v < NV; ++v) {
            __m256 a0 = _mm512_castps512_ps256(z[v][0]);
            for (std::int64_t kk = k; kk < n8; kk += 8)
                a0 = _mm256_fmadd_ps(load8<dtype::bf16>(p + kk * 2), _mm256_loadu_ps(x + v * ldx + kk), a0);
            const __m256 a1 = high_half(z[v][0]), a2 = _mm512_castps512_ps256(z[v][1]), a3 = high_half(z[v][1]);
            float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
            for (std::int64_t kk = n8; kk < n; ++kk) s = std::fma(load1<dtype::bf16>(p, kk), x[v * ldx + kk], s);
            y[v * ldy + (r - r0)] = s;
        }
    }
}

// R weight rows x NV vectors per micro-kernel (prefill and batched decode in the
// fp32 mode): each (row, vector) output keeps the two 16-lane accumulators, the
// tails and the reduction of dot_group_bf16_avx512, so it is that kernel's result
// bit for bit (row-exact); the R rows share every activation load and the NV
// vectors every weight load. `stream`: the rows come from memory (prefetch ahead).
template <int R, int NV>
CALSERVE_AVX512_ISA void dot_block_bf16_avx512(const tensor_view& w, std::int64_t r0, const float* x, std::int64_t ldx,
                                               float* y, std::int64_t ldy, bool stream) {
    const std::int64_t n = w.cols, n32 = n & ~std::int64_t{31}, n8 = n & ~std::int64_t{7};
    const std::byte* p[R];
    for (int r = 0; r < R; ++r) p[r] = w.row(r0 + r);
    __m512 z[R][NV][2];
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < NV; ++v) z[r][v][0] = z[r][v][1] = _mm512_setzero_ps();
    for (std::int64_t k = 0; k < n32; k += 32) {
        __m512 w0[R], w1[R];
        for (int r = 0; r < R; ++r) {
            if (stream) _mm_prefetch(reinterpret_cast<const char*>(p[r] + k * 2 + k_batch_prefetch_bytes), _MM_HINT_T2);
            w0[r] = load16_bf16(p[r] + k * 2);
            w1[r] = load16_bf16(p[r] + (k + 16) * 2);
        }
        for (int v = 0; v < NV; ++v) {
            const __m512 xa = _mm512_loadu_ps(x + v * ldx + k), xb = _mm512_loadu_ps(x + v * ldx + k + 16);
            for (int r = 0; r < R; ++r) {
                z[r][v][0] = _mm512_fmadd_ps(w0[r], xa, z[r][v][0]);
                z[r][v][1] = _mm512_fmadd_ps(w1[r], xb, z[r][v][1]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < NV; ++v) {
            __m256 a0 = _mm512_castps512_ps256(z[r][v][0]);
            for (std::int64_t kk = n32; kk < n8; kk += 8)
                a0 = _mm256_fmadd_ps(load8<dtype::bf16>(p[r] + kk * 2), _mm256_loadu_ps(x + v * ldx + kk), a0);
            const __m256 a1 = high_half(z[r][v][0]), a2 = _mm512_castps512_ps256(z[r][v][1]), a3 = high_half(z[r][v][1]);
            float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
            for (std::int64_t kk = n8; kk < n; ++kk) s = std::fma(load1<dtype::bf16>(p[r], kk), x[v * ldx + kk], s);
            y[v * ldy + r] = s;
        }
}

#pragma GCC diagnostic pop

// Rows [r0, r1) against NV vectors in blocks of k_block_rows rows (the rest one by one)
// when they are in cache; rows streamed from memory go one at a time, a single
// sequential stream (three interleaved streams made batch-4 decode 0.75x as fast).
constexpr int k_block_rows = 3;  // 3 rows x 4 vectors x 2 = 24 accumulators of the 32 registers
template <int NV>
void rows_blocked_bf16(const tensor_view& w, std::int64_t r0, std::int64_t r1, const float* x, std::int64_t ldx,
                       float* y, std::int64_t ldy, bool stream) {
    std::int64_t r = r0;
    for (; !stream && r + k_block_rows <= r1; r += k_block_rows)
        dot_block_bf16_avx512<k_block_rows, NV>(w, r, x, ldx, y + (r - r0), ldy, stream);
    for (; r < r1; ++r) dot_block_bf16_avx512<1, NV>(w, r, x, ldx, y + (r - r0), ldy, stream);
}

// Activations of one vector tile are re-read by every row tile: keep them in L2.
constexpr std::int64_t k_vector_tile_bytes = 256 << 10;

// dot_rows_multi for BF16 weights on AVX-512 (fp32 mode): vectors in tiles that stay
// in L2; within a tile, rows in tiles that stay in L1/L2 while every vector group
// (of at most 4, balanced) passes over them, the first streaming them in.
void rows_multi_bf16_avx512(const tensor_view& w, std::int64_t r0, std::int64_t r1, const float* x, std::int64_t nvec,
                            std::int64_t ldx, float* y, std::int64_t ldy);

std::atomic<bool> g_bf16_avx512_allowed{true};

// The BF16 group kernel this CPU runs: the AVX-512 form when present (same bits).
template <int NV>
void dot_group_bf16(const tensor_view& w, std::int64_t r0, std::int64_t r1, const float* x, std::int64_t ldx, float* y,
                    std::int64_t ldy) {
    if (bf16_dot_avx512()) return dot_group_bf16_avx512<NV>(w, r0, r1, x, ldx, y, ldy);
    dot_group_t<dtype::bf16, NV>(w, r0, r1, x, ldx, y, ldy);
}

template <dtype T, int NV>
void dot_group(const tensor_view& w, std::int64_t r0, std::int64_t r1, const float* x, std::int64_t ldx, float* y,
               std::int64_t ldy) {
    if constexpr (T == dtype::bf16) dot_group_bf16<NV>(w, r0, r1, x, ldx, y, ldy);
    else dot_group_t<T, NV>(w, r0, r1, x, ldx, y, ldy);
}

// Most vectors per pass: 4 x 4 accumulators fill the 16 registers (the weight
// chunk is reloaded from L1 when spilled); measured 10-15% faster than 3.
constexpr std::int64_t k_group = 4;
constexpr std::int64_t k_tile_bytes = 32 << 10;  // weight rows revisited by every group stay in cache

void rows_multi_bf16_avx512(const tensor_view& w, std::int64_t r0, std::int64_t r1, const float* x, std::int64_t nvec,
                            std::int64_t ldx, float* y, std::int64_t ldy) {
    const std::int64_t fit = k_tile_bytes / std::max<std::int64_t>(1, w.cols * 2);
    const std::int64_t row_tile = std::max<std::int64_t>(k_block_rows, fit / k_block_rows * k_block_rows);
    const std::int64_t vec_tile = std::max<std::int64_t>(k_group, k_vector_tile_bytes / std::max<std::int64_t>(1, w.cols * 4));
    for (std::int64_t v0 = 0; v0 < nvec; v0 += vec_tile) {
        const std::int64_t v1 = std::min(nvec, v0 + vec_tile);
        const std::int64_t groups = (v1 - v0 + k_group - 1) / k_group;
        for (std::int64_t t0 = r0; t0 < r1; t0 += row_tile) {
            const std::int64_t t1 = std::min(r1, t0 + row_tile);
            for (std::int64_t g = 0, v = v0; g < groups; ++g) {
                const std::int64_t count = (v1 - v + (groups - g) - 1) / (groups - g);
                const float* xv = x + v * ldx;
                float* yv = y + v * ldy + (t0 - r0);
                const bool stream = g == 0;
                switch (count) {
                    case 1: rows_blocked_bf16<1>(w, t0, t1, xv, ldx, yv, ldy, stream); break;
                    case 2: rows_blocked_bf16<2>(w, t0, t1, xv, ldx, yv, ldy, stream); break;
                    case 3: rows_blocked_bf16<3>(w, t0, t1, xv, ldx, yv, ldy, stream); break;
                    default: rows_blocked_bf16<4>(w, t0, t1, xv, ldx, yv, ldy, stream); break;
                }
                v += count;
            }
        }
    }
}

// All nvec vectors against rows [r0, r1): a tile of weight rows is streamed from
// memory by the first group of vectors and re-read from cache by the others, so
// the weights are read from memory once whatever nvec is. Groups are balanced
// (5 = 3 + 2, 7 = 4 + 3): a group of one has too few FMA chains.
template <dtype T>
void dot_rows_multi_t(const tensor_view& w, std::int64_t r0, std::int64_t r1, const float* x, std::int64_t nvec,
                      std::int64_t ldx, float* y, std::int64_t ldy) {
    const std::int64_t row_bytes = std::max<std::int64_t>(1, w.cols * esize(T));
    const std::int64_t tile = std::max<std::int64_t>(1, k_tile_bytes / row_bytes);
    const std::int64_t groups = (nvec + k_group - 1) / k_group;
    for (std::int64_t t0 = r0; t0 < r1; t0 += tile) {
        const std::int64_t t1 = std::min(r1, t0 + tile);
        for (std::int64_t g = 0, v = 0; g < groups; ++g) {
            const std::int64_t count = (nvec - v + (groups - g) - 1) / (groups - g);
            const float* xv = x + v * ldx;
            float* yv = y + v * ldy + (t0 - r0);
            switch (count) {
                case 1: dot_group<T, 1>(w, t0, t1, xv, ldx, yv, ldy); break;
                case 2: dot_group<T, 2>(w, t0, t1, xv, ldx, yv, ldy); break;
                case 3: dot_group<T, 3>(w, t0, t1, xv, ldx, yv, ldy); break;
                default: dot_group<T, 4>(w, t0, t1, xv, ldx, yv, ldy); break;
            }
            v += count;
        }
    }
}

}  // namespace

bool bf16_dot_avx512() { return g_bf16_avx512_allowed.load(std::memory_order_relaxed) && avx512_available(); }
void allow_bf16_dot_avx512(bool allowed) { g_bf16_avx512_allowed.store(allowed, std::memory_order_relaxed); }

void dot_rows(const tensor_view& w, std::int64_t r0, std::int64_t r1, const float* x, float* y) {
    switch (w.type) {
        case dtype::f32: return dot_group_t<dtype::f32, 1>(w, r0, r1, x, 0, y, 0);
        case dtype::bf16: return dot_group<dtype::bf16, 1>(w, r0, r1, x, 0, y, 0);
        case dtype::f16: return dot_group_t<dtype::f16, 1>(w, r0, r1, x, 0, y, 0);
        case dtype::q8_0: return dot_rows_multi(w, r0, r1, x, 1, w.cols, y, 0);
    }
}

void dot_rows_multi(const tensor_view& w, std::int64_t r0, std::int64_t r1, const float* x, std::int64_t nvec,
                    std::int64_t ldx, float* y, std::int64_t ldy) {
    switch (w.type) {
        case dtype::f32: return dot_rows_multi_t<dtype::f32>(w, r0, r1, x, nvec, ldx, y, ldy);
        case dtype::bf16:
            if (nvec > 1 && bf16_dot_avx512()) return rows_multi_bf16_avx512(w, r0, r1, x, nvec, ldx, y, ldy);
            return dot_rows_multi_t<dtype::bf16>(w, r0, r1, x, nvec, ldx, y, ldy);
        case dtype::f16: return dot_rows_multi_t<dtype::f16>(w, r0, r1, x, nvec, ldx, y, ldy);
        case dtype::q8_0: {
            thread_local q8_vectors xq;
            quantize_vectors_q8(x, nvec, ldx, w.cols, xq);
            return dot_rows_q8(w, r0, r1, xq, nvec, y, ldy);
        }
    }
}

float dot_f32(const float* a, const float* b, std::int64_t n) {
    const std::int64_t n8 = n & ~std::int64_t{7};
    __m256 acc = _mm256_setzero_ps();
    for (std::int64_t k = 0; k < n8; k += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), acc);
    float s = hsum(acc);
    for (std::int64_t k = n8; k < n; ++k) s += a[k] * b[k];
    return s;
}

float sum_f32(const float* a, std::int64_t n) {
    const std::int64_t n32 = n & ~std::int64_t{31};
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (std::int64_t k = 0; k < n32; k += 32) {
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(a + k));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(a + k + 8));
        s2 = _mm256_add_ps(s2, _mm256_loadu_ps(a + k + 16));
        s3 = _mm256_add_ps(s3, _mm256_loadu_ps(a + k + 24));
    }
    float s = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (std::int64_t k = n32; k < n; ++k) s += a[k];
    return s;
}

void axpy_f32(float a, const float* x, float* y, std::int64_t n) {
    const std::int64_t n8 = n & ~std::int64_t{7};
    const __m256 av = _mm256_set1_ps(a);
    for (std::int64_t k = 0; k < n8; k += 8)
        _mm256_storeu_ps(y + k, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + k), _mm256_loadu_ps(y + k)));
    for (std::int64_t k = n8; k < n; ++k) y[k] += a * x[k];
}

void rmsnorm(const float* x, const float* w, std::int64_t n, float eps, float* out) {
    const float mean_sq = dot_f32(x, x, n) / static_cast<float>(n);
    const float scale = 1.0f / std::sqrt(mean_sq + eps);
    for (std::int64_t i = 0; i < n; ++i) out[i] = w[i] * (x[i] * scale);
}

void rope_rotate_half(float* v, const float* cos, const float* sin, std::int64_t head_dim) {
    const std::int64_t half = head_dim / 2;
    for (std::int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cos[i] - b * sin[i];
        v[i + half] = b * cos[i] + a * sin[i];
    }
}

void silu_mul(float* g, const float* u, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void softmax(float* x, std::int64_t n) {
    float m = x[0];
    for (std::int64_t i = 1; i < n; ++i) m = std::max(m, x[i]);
    float sum = 0.0f;
    for (std::int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - m));
    const float inv = 1.0f / sum;
    for (std::int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace calserve::model
