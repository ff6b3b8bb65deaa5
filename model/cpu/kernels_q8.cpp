// Q8_0 weights: activation quantisation and the int8 dot-product kernels; see kernels.hpp.
//
// A Q8_0 row is blocks of 32 int8 weights q_w with one FP16 scale d_w. The
// activation vector is quantised the same way (32 int8 q_x per block, an FP32
// scale d_x), once per linear call, and each block contributes
// d_w * d_x * sum(q_w * q_x). One output (row r, vector v) is always the same
// computation: the block's integer products summed exactly into 8 int32 lanes (lane
// j: bytes 4j..4j+3), converted to FP32 and multiply-added with the FP32 scale
// d_w * d_x into one of two 8-lane accumulators (even blocks, odd blocks), then
// (acc0 + acc1) reduced by stored::hsum. Both forms below compute exactly that:
// - AVX2: maddubs on |q_w| and sign-adjusted q_x, madd into int32 (exact: pair sums
//   stay below 2^15), one block at a time;
// - AVX512_VNNI: two blocks per 512-bit register (lanes 0-7 the even block, 8-15 the
//   odd one: the two accumulators side by side), `vpdpbusd` on q_w + 128 (unsigned)
//   and q_x starting from -128 * sum(q_x) per lane (precomputed with the activations),
//   so the int32 lanes are the AVX2 form's; register-blocked, several rows x several
//   vectors per micro-kernel (prefill and batched decode), the BF16 path's tiling.
// Nothing in either depends on how many rows or vectors share a call: row-exact.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>

#include "model/cpu/kernels.hpp"
#include "model/weights/stored_rows.hpp"

namespace calserve::model {
namespace {

constexpr std::int64_t k_block = stored::q8_block, k_block_bytes = stored::q8_block_bytes;
constexpr std::int64_t k_group = 4;               // AVX2: vectors per pass (4 x 2 accumulators)
constexpr std::int64_t k_tile_bytes = 32 << 10;  // weight rows revisited by every group stay in cache

using stored::hsum;

inline float block_scale(const std::byte* blk) { return stored::q8_block_scale(blk); }

// One block's integer dot product as 8 FP32 lanes (exact: |sum| < 2^24).
inline __m256 block_dot(__m256i abs_w, __m256i sign_w, __m256i x) {
    const __m256i s16 = _mm256_maddubs_epi16(abs_w, _mm256_sign_epi8(x, sign_w));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)));
}

// Block b of row p into accumulator slot A of each of the NV vectors.
template <int NV, int A>
inline void q8_block(const std::byte* p, std::int64_t b, std::int64_t nb, const q8_vectors& xq, std::int64_t v0,
                     __m256 (&acc)[NV][2]) {
    const std::byte* blk = p + b * k_block_bytes;
    const float dw = block_scale(blk);
    const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    const __m256i aw = _mm256_sign_epi8(wq, wq);
    for (int v = 0; v < NV; ++v) {
        const std::int64_t at = (v0 + v) * nb + b;
        const auto* xb = reinterpret_cast<const __m256i*>(xq.q.data() + at * k_block);
        const __m256 s = _mm256_set1_ps(dw * xq.d[static_cast<std::size_t>(at)]);
        acc[v][A] = _mm256_fmadd_ps(block_dot(aw, wq, _mm256_loadu_si256(xb)), s, acc[v][A]);
    }
}

// Even blocks into acc[.][0], odd into acc[.][1], then (acc0 + acc1) across lanes.
template <int NV>
void q8_group(const tensor_view& w, std::int64_t r0, std::int64_t r1, const q8_vectors& xq, std::int64_t v0,
              float* y, std::int64_t ldy) {
    const std::int64_t nb = w.cols / k_block;
    for (std::int64_t r = r0; r < r1; ++r) {
        const std::byte* p = w.row(r);
        __m256 acc[NV][2];
        for (int v = 0; v < NV; ++v) acc[v][0] = acc[v][1] = _mm256_setzero_ps();
        std::int64_t b = 0;
        for (; b + 1 < nb; b += 2) {
            q8_block<NV, 0>(p, b, nb, xq, v0, acc);
            q8_block<NV, 1>(p, b + 1, nb, xq, v0, acc);
        }
        if (b < nb) q8_block<NV, 0>(p, b, nb, xq, v0, acc);
        for (int v = 0; v < NV; ++v) y[v * ldy + (r - r0)] = hsum(_mm256_add_ps(acc[v][0], acc[v][1]));
    }
}

void rows_avx2(const tensor_view& w, std::int64_t r0, std::int64_t r1, const q8_vectors& xq, std::int64_t nvec,
               float* y, std::int64_t ldy) {
    const std::int64_t row_bytes = std::max<std::int64_t>(1, w.cols / k_block * k_block_bytes);
    const std::int64_t tile = std::max<std::int64_t>(1, k_tile_bytes / row_bytes);
    const std::int64_t groups = (nvec + k_group - 1) / k_group;
    for (std::int64_t t0 = r0; t0 < r1; t0 += tile) {
        const std::int64_t t1 = std::min(r1, t0 + tile);
        for (std::int64_t g = 0, v = 0; g < groups; ++g) {
            const std::int64_t count = (nvec - v + (groups - g) - 1) / (groups - g);
            float* yv = y + v * ldy + (t0 - r0);
            switch (count) {
                case 1: q8_group<1>(w, t0, t1, xq, v, yv, ldy); break;
                case 2: q8_group<2>(w, t0, t1, xq, v, yv, ldy); break;
                case 3: q8_group<3>(w, t0, t1, xq, v, yv, ldy); break;
                default: q8_group<4>(w, t0, t1, xq, v, yv, ldy); break;
            }
            v += count;
        }
    }
}

// ---- AVX512_VNNI form ----

std::atomic<bool> g_vnni_allowed{true};

bool cpu_has_avx512_vnni() {
    static const bool has = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vnni");
    }();
    return has;
}

constexpr int k_vnni_max_group = 4;              // vectors per micro-kernel
constexpr std::int64_t k_vnni_row_block = 24;    // rows every vector group re-reads from L1/L2
constexpr std::int64_t k_vector_tile_bytes = 256 << 10;  // activations of a tile stay in L2
constexpr std::int64_t k_prefetch_bytes = 2048;  // weight stream lead when rows come from memory, at least
// Row blocks of lead, into L2 (`prefetcht2`), as the BF16 kernels (kernels_bf16.cpp): the
// rows arrive while the products run. Batch 8 / 16 decode 1.18x / 1.10x steps per
// CPU-second over `prefetcht0` one block ahead (A/B/A/B, load average 6-9).
constexpr std::int64_t k_prefetch_blocks = 2;
// Rows per micro-kernel: rows x vectors accumulators plus two registers per row.
constexpr int vnni_rows_for(int g) { return g == 1 ? 1 : 4; }

#define CALSERVE_VNNI_ISA __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// The two FP16 block scales of blocks at blk and blk + 34 as [d0 x 8, d1 x 8] (exact).
CALSERVE_VNNI_ISA inline __m512 pair_scales(const std::byte* blk) {
    std::uint16_t h0, h1;
    std::memcpy(&h0, blk, 2);
    std::memcpy(&h1, blk + k_block_bytes, 2);
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h0 | (static_cast<unsigned>(h1) << 16))));
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f));
}

// The 64 weights of blocks at blk and blk + 34, offset to unsigned (q + 128).
CALSERVE_VNNI_ISA inline __m512i pair_weights(const std::byte* blk) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + k_block_bytes + 2));
    return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1), _mm512_set1_epi8(-128));
}

// R rows (pointers w[0..R)) x G vectors starting at vector v0; nb blocks per row.
// `ahead`: prefetch lead in bytes, at least the R rows' span (k_prefetch_blocks blocks on).
template <int R, int G, bool Stream>
CALSERVE_VNNI_ISA void block_vnni(const std::byte* const* w, const q8_vectors& xq, std::int64_t v0, float* y,
                                  std::int64_t ldy, std::int64_t ahead) {
    const std::int64_t nb = xq.blocks, np = nb / 2;
    __m512 acc[R][G];
    for (int r = 0; r < R; ++r)
        for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
    for (std::int64_t j = 0; j < np; ++j) {
        __m512i wv[R];
        __m512 dw[R];
        for (int r = 0; r < R; ++r) {
            const std::byte* blk = w[r] + 2 * j * k_block_bytes;
            if constexpr (Stream) _mm_prefetch(reinterpret_cast<const char*>(blk + ahead), _MM_HINT_T2);
            wv[r] = pair_weights(blk);
            dw[r] = pair_scales(blk);
        }
        for (int g = 0; g < G; ++g) {
            const std::int64_t at = (v0 + g) * nb + 2 * j;
            const __m512i xv = _mm512_loadu_si512(xq.q.data() + at * k_block);
            const __m512i corr = _mm512_loadu_si512(xq.corr.data() + at * 8);
            const __m512 dx = _mm512_loadu_ps(xq.d_pairs.data() + ((v0 + g) * ((nb + 1) / 2) + j) * 16);
            for (int r = 0; r < R; ++r) {
                const __m512 s = _mm512_mul_ps(dw[r], dx);
                acc[r][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(corr, wv[r], xv)), s, acc[r][g]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int g = 0; g < G; ++g) {
            __m256 lo = _mm512_castps512_ps256(acc[r][g]);
            if (nb % 2 != 0) {  // the last (even) block alone, into the even accumulator
                const std::byte* blk = w[r] + (nb - 1) * k_block_bytes;
                const std::int64_t at = (v0 + g) * nb + nb - 1;
                const __m256i wq = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)),
                                                    _mm256_set1_epi8(-128));
                const __m256i t = _mm256_dpbusd_epi32(
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq.corr.data() + at * 8)), wq,
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq.q.data() + at * k_block)));
                const __m256 s = _mm256_set1_ps(block_scale(blk) * xq.d[static_cast<std::size_t>(at)]);
                lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), s, lo);
            }
            const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][g]), 1));
            y[g * ldy + r] = hsum(_mm256_add_ps(lo, hi));
        }
}

#pragma GCC diagnostic pop

// Rows [r0, r1) against G vectors from v0, R rows per micro-kernel, the rest one by one.
template <int G>
void group_vnni(const tensor_view& w, std::int64_t r0, std::int64_t r1, const q8_vectors& xq, std::int64_t v0,
                bool stream, float* y, std::int64_t ldy) {
    constexpr int R = vnni_rows_for(G);
    const std::byte* rows[R];
    auto block = [&](auto rows_const, std::int64_t r) {
        constexpr int n = decltype(rows_const)::value;
        for (int i = 0; i < n; ++i) rows[i] = w.row(r + i);
        const std::int64_t ahead = std::max<std::int64_t>(k_prefetch_bytes, k_prefetch_blocks * n * (w.row(1) - w.row(0)));
        if (stream) block_vnni<n, G, true>(rows, xq, v0, y + (r - r0), ldy, ahead);
        else block_vnni<n, G, false>(rows, xq, v0, y + (r - r0), ldy, ahead);
    };
    std::int64_t r = r0;
    for (; r + R <= r1; r += R) block(std::integral_constant<int, R>{}, r);
    for (; r < r1; ++r) block(std::integral_constant<int, 1>{}, r);
}

// Vectors in tiles that stay in L2; within a tile, rows in blocks whose weights stay
// in L1/L2 while every vector group of the tile passes over them (the first group
// streams them in). Groups are balanced (6 = 3 + 3, 16 = 4 x 4).
void rows_vnni(const tensor_view& w, std::int64_t r0, std::int64_t r1, const q8_vectors& xq, std::int64_t nvec,
               float* y, std::int64_t ldy) {
    const std::int64_t tile = std::max<std::int64_t>(k_vnni_max_group, k_vector_tile_bytes / (xq.blocks * 64 + 1));
    for (std::int64_t t0 = 0; t0 < nvec; t0 += tile) {
        const std::int64_t t1 = std::min(nvec, t0 + tile);
        const std::int64_t groups = (t1 - t0 + k_vnni_max_group - 1) / k_vnni_max_group;
        for (std::int64_t b0 = r0; b0 < r1; b0 += k_vnni_row_block) {
            const std::int64_t b1 = std::min(r1, b0 + k_vnni_row_block);
            for (std::int64_t g = 0, v = t0; g < groups; ++g) {
                const std::int64_t count = (t1 - v + (groups - g) - 1) / (groups - g);
                float* yv = y + v * ldy + (b0 - r0);
                // One vector (decode) leaves the stream to the hardware prefetcher, as the
                // AVX2 form does (A/B under load 21-25: 50.8-61.2 steps per CPU-second
                // without, 52.4-53.5 with; no clear difference, fewer instructions).
                const bool stream = g == 0 && count > 1;
                switch (count) {
                    case 1: group_vnni<1>(w, b0, b1, xq, v, stream, yv, ldy); break;
                    case 2: group_vnni<2>(w, b0, b1, xq, v, stream, yv, ldy); break;
                    case 3: group_vnni<3>(w, b0, b1, xq, v, stream, yv, ldy); break;
                    default: group_vnni<4>(w, b0, b1, xq, v, stream, yv, ldy); break;
                }
                v += count;
            }
        }
    }
}

// One block's 32 int8 values as 8 int32 lanes of -128 * (sum of 4 bytes) and its
// scale, for the VNNI form (AVX2 instructions: maddubs of 128 and q_x is exact).
void vnni_side_data(const __m256i bytes, std::int32_t* corr) {
    const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(static_cast<char>(0x80)), bytes);
    const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(corr), _mm256_sub_epi32(_mm256_setzero_si256(), s32));
}

}  // namespace

bool q8_dot_vnni() { return g_vnni_allowed.load(std::memory_order_relaxed) && cpu_has_avx512_vnni(); }
void allow_q8_dot_vnni(bool allowed) { g_vnni_allowed.store(allowed, std::memory_order_relaxed); }

namespace {

void size_vectors_q8(std::int64_t nvec, std::int64_t n, q8_vectors& out) {
    const std::int64_t nb = n / k_block, np = (nb + 1) / 2;
    out.blocks = nb;
    out.q.resize(static_cast<std::size_t>(nvec * nb * k_block));
    out.d.resize(static_cast<std::size_t>(nvec * nb));
    out.corr.resize(static_cast<std::size_t>(nvec * nb * 8));
    out.d_pairs.assign(static_cast<std::size_t>(nvec * np * 16), 0.0f);
}

// Vectors [v0, v1) of an already sized `out`.
void quantize_range(const float* x, std::int64_t v0, std::int64_t v1, std::int64_t ldx, q8_vectors& out) {
    const std::int64_t nb = out.blocks, np = (nb + 1) / 2;
    const __m256 sign_mask = _mm256_set1_ps(-0.0f);
    for (std::int64_t v = v0; v < v1; ++v) {
        for (std::int64_t b = 0; b < nb; ++b) {
            const float* src = x + v * ldx + b * k_block;
            __m256 f[4];
            __m256 amax = _mm256_setzero_ps();
            for (int i = 0; i < 4; ++i) {
                f[i] = _mm256_loadu_ps(src + 8 * i);
                amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_mask, f[i]));
            }
            __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
            m = _mm_max_ps(m, _mm_movehl_ps(m, m));
            m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 0x55));
            const float d = _mm_cvtss_f32(m) / 127.0f;
            const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
            __m256i q[4];
            for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(f[i], id));  // round to nearest even
            // Pack 32 int32 -> 32 int8 (saturating; values are within [-127, 127]) and undo the lane interleave.
            const __m256i lo = _mm256_packs_epi32(q[0], q[1]), hi = _mm256_packs_epi32(q[2], q[3]);
            const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(lo, hi),
                                                              _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            const std::int64_t at = v * nb + b;
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q.data() + at * k_block), bytes);
            out.d[static_cast<std::size_t>(at)] = d;
            vnni_side_data(bytes, out.corr.data() + at * 8);
            std::fill_n(out.d_pairs.data() + (v * np + b / 2) * 16 + (b % 2) * 8, 8, d);
        }
    }
}

}  // namespace

void quantize_vectors_q8(const float* x, std::int64_t nvec, std::int64_t ldx, std::int64_t n, q8_vectors& out) {
    size_vectors_q8(nvec, n, out);
    quantize_range(x, 0, nvec, ldx, out);
}

void quantize_vectors_q8(thread_pool& pool, const float* x, std::int64_t nvec, std::int64_t ldx, std::int64_t n,
                         q8_vectors& out) {
    size_vectors_q8(nvec, n, out);
    // One prefill's vectors split across the threads; a decode batch's (< 64 x 1,024 values) inline.
    pool.parallel_for(nvec, 1, nvec * n, [&](std::int64_t b, std::int64_t e) { quantize_range(x, b, e, ldx, out); });
}

void dot_rows_q8(const tensor_view& w, std::int64_t r0, std::int64_t r1, const q8_vectors& xq, std::int64_t nvec,
                 float* y, std::int64_t ldy) {
    if (q8_dot_vnni()) return rows_vnni(w, r0, r1, xq, nvec, y, ldy);
    rows_avx2(w, r0, r1, xq, nvec, y, ldy);
}

}  // namespace calserve::model
