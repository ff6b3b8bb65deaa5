// The bf16 arithmetic mode's dot products: `vdpbf16ps` micro-kernels and their FMA
// emulation; see kernels.hpp (arithmetic, dot_rows_bf16_products).
//
// One output (row r, vector v) is always the same computation: a 16-lane FP32
// accumulator; for each 32-element step of the columns, lane i adds the exact product
// of elements 2i+1, rounds (subnormal results to zero), then adds that of elements 2i
// and rounds again (what `vdpbf16ps` does, measured against this emulation on this
// CPU); the last step's missing columns are zeros; then lanes i and i + 8 are added
// and the eight sums reduced by stored::hsum. Nothing in it depends on how many rows
// or vectors a micro-kernel handles, so the result is row-exact by construction.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>

#include "model/core/bf16.hpp"
#include "model/cpu/kernels.hpp"
#include "model/weights/stored_rows.hpp"

namespace calserve::model {
namespace {

using stored::hsum;

constexpr std::int64_t k_step = 32;  // BF16 elements per vdpbf16ps
// Activations of one token tile are re-read by every row block: keep them in L2.
constexpr std::int64_t k_vector_tile_bytes = 256 << 10;
constexpr int k_max_group = 8;                   // vectors per micro-kernel
// Tiles of more than k_prefill_vectors vectors (prefill) run groups of at most 6: 4 rows
// x 6 vectors loads 10 registers per 24 products where 3 x 8 loads 11. One thread's
// 3,072 x 1,024 product at 128 tokens, alternating (load average 6-9): 4.77 / 4.77 /
// 4.67 ms per CPU-second against 5.00 / 5.21 / 5.00 (1.05-1.09x). Decode batches up to
// 16 keep groups of 8 (one group streams the weights, see rows_for). Same bits.
constexpr int k_prefill_group = 6;
constexpr std::int64_t k_prefill_vectors = 16;
constexpr std::int64_t k_prefetch_bytes = 4096;  // weight stream lead, at least
constexpr std::int64_t k_prefetch_blocks = 2;    // row blocks of lead (block_native)
// Rows whose weights every vector group of a tile re-reads from L1/L2; a multiple of
// every rows_for value, so only the range's last block has a remainder.
constexpr std::int64_t k_row_block = 24;
// Pool work units per rounded element: one prefill's vectors (a few hundred) are split
// across the threads, a decode batch's (under 64 of 1,024 elements) are rounded inline.
constexpr std::int64_t k_vector_work = 1;

// Weight rows per micro-kernel for a group of g vectors: rows x g accumulators plus
// the rows' weight registers stay within the 32 zmm registers. One vector (decode)
// reads one row at a time: a single sequential stream per thread ran B1 decode at
// 0.77-0.80 of the roofline against 0.68-0.77 with eight rows interleaved.
// A batch-8 decode runs as one group of 8 (3 rows: 24 accumulators): the rows stream
// from memory while 8 vectors' products run, where two groups of 4 left the first
// group's loads stalled and the second's arithmetic after them (the streaming group
// took 62% of the step's CPU samples, the cached one 11%).
constexpr int rows_for(int g) { return g == 1 ? 1 : g == 2 ? 4 : g <= 4 ? 6 : g <= 6 ? 4 : 3; }

std::atomic<bool> g_native_allowed{true};

bool cpu_has_avx512_bf16() {
    static const bool has = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512bf16");
    }();
    return has;
}

#define CALSERVE_BF16DP_ISA __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

CALSERVE_BF16DP_ISA inline float hsum16(__m512 v) {
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return hsum(_mm256_add_ps(_mm512_castps512_ps256(v), hi));
}

// R weight rows (pointers w[0..R)) against G vectors (x, x + ldx, ...), n columns, n
// a multiple of k_step. `Stream`: the rows come from memory (first vector group of a
// tile): prefetch ahead. Keep the loop free of masks and of a tail step after it:
// with either, GCC stored all R x G accumulators to the stack at every step (the
// kernel then ran at a third of the instruction's rate).
// `ahead`: prefetch distance in bytes; a block of R contiguous rows prefetches the same
// offsets of the rows two blocks on, so the lead covers whole blocks (with a fixed
// 4 KB lead six interleaved 2 KB rows prefetched mostly lines already being read, and
// the streaming group of a batch-8 decode ran at a fraction of the bandwidth).
// The prefetch goes to L2 (`prefetcht2`), not L1: with `prefetcht0` the stream and the
// products of a batch ran one after the other (a batch-8 step took the time of its
// weight stream plus its arithmetic); into L2, the lines arrive while the products run
// and the micro-kernel's loads find them there. Decode steps per CPU-second, batch 4 /
// 8 / 16, A/B/A/B at load average 5-8: 1.40-1.45x / 1.51-1.53x / 1.25x; batch 1 within
// the noise. The arithmetic is unchanged (same bits).
template <int R, int G, bool Stream>
CALSERVE_BF16DP_ISA void block_native(const std::byte* const* w, const std::uint16_t* x, std::int64_t ldx,
                                      std::int64_t n, float* y, std::int64_t ldy, std::int64_t ahead) {
    __m512 acc[R][G];
    for (int r = 0; r < R; ++r)
        for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
    for (std::int64_t k = 0; k < n; k += k_step) {
        __m512i wv[R];
        for (int r = 0; r < R; ++r) {
            if constexpr (Stream) _mm_prefetch(reinterpret_cast<const char*>(w[r] + k * 2 + ahead), _MM_HINT_T2);
            wv[r] = _mm512_loadu_si512(w[r] + k * 2);
        }
        for (int g = 0; g < G; ++g) {
            const __m512i xv = _mm512_load_si512(x + g * ldx + k);
            for (int r = 0; r < R; ++r) acc[r][g] = _mm512_dpbf16_ps(acc[r][g], (__m512bh)wv[r], (__m512bh)xv);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int g = 0; g < G; ++g) y[g * ldy + r] = hsum16(acc[r][g]);
}

#pragma GCC diagnostic pop

// Subnormal -> signed zero, on FP32 bit patterns (BF16 pairs widen to FP32 patterns).
inline __m256i flush_subnormal(__m256i v) {
    const __m256i exp = _mm256_and_si256(v, _mm256_set1_epi32(0x7f800000));
    const __m256i tiny = _mm256_cmpeq_epi32(exp, _mm256_setzero_si256());
    return _mm256_andnot_si256(_mm256_and_si256(tiny, _mm256_set1_epi32(0x7fffffff)), v);
}

// Eight lanes of the 16-lane chain: dwords of BF16 pairs, odd product first.
inline __m256 emulated_step(__m256 acc, __m256i wd, __m256i xd) {
    const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    const __m256 wo = _mm256_castsi256_ps(flush_subnormal(_mm256_and_si256(wd, hi)));
    const __m256 xo = _mm256_castsi256_ps(flush_subnormal(_mm256_and_si256(xd, hi)));
    const __m256 we = _mm256_castsi256_ps(flush_subnormal(_mm256_slli_epi32(wd, 16)));
    const __m256 xe = _mm256_castsi256_ps(flush_subnormal(_mm256_slli_epi32(xd, 16)));
    acc = _mm256_castsi256_ps(flush_subnormal(_mm256_castps_si256(_mm256_fmadd_ps(wo, xo, acc))));
    return _mm256_castsi256_ps(flush_subnormal(_mm256_castps_si256(_mm256_fmadd_ps(we, xe, acc))));
}

// One output by the emulation (the same steps as block_native's lane chains).
float dot_emulated(const std::byte* w, const std::uint16_t* x, std::int64_t n) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    alignas(64) std::uint16_t tail[k_step];
    for (std::int64_t k = 0; k < n; k += k_step) {
        const std::byte* wk = w + k * 2;
        if (n - k < k_step) {
            std::memset(tail, 0, sizeof tail);
            std::memcpy(tail, wk, static_cast<std::size_t>(n - k) * 2);
            wk = reinterpret_cast<const std::byte*>(tail);
        }
        auto load = [](const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); };
        lo = emulated_step(lo, load(wk), load(x + k));
        hi = emulated_step(hi, load(wk + 32), load(x + k + 16));
    }
    return hsum(_mm256_add_ps(lo, hi));
}

void rows_emulated(const tensor_view& w, std::int64_t r0, std::int64_t r1, const bf16_vectors& x, std::int64_t nvec,
                   float* y, std::int64_t ldy) {
    for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t v = 0; v < nvec; ++v)
            y[v * ldy + (r - r0)] = dot_emulated(w.row(r), x.data.data() + v * x.ld, w.cols);
}

// Rows [r0, r1) against G vectors. Rows whose length is not a multiple of k_step
// are copied, zero-padded, into `pad` first (shapes we serve never need it).
template <int G>
void group_native(const tensor_view& w, std::int64_t r0, std::int64_t r1, const std::uint16_t* x, std::int64_t ldx,
                  bool stream, float* y, std::int64_t ldy) {
    constexpr int R = rows_for(G);
    thread_local simd_vector<std::uint16_t> pad;
    const bool padded = w.cols != ldx;
    if (padded) pad.assign(static_cast<std::size_t>(R * ldx), 0);
    const std::byte* rows[R];
    auto block = [&](auto rows_const, std::int64_t r) {
        constexpr int n = decltype(rows_const)::value;
        for (int i = 0; i < n; ++i) {
            rows[i] = w.row(r + i);
            if (!padded) continue;
            std::memcpy(pad.data() + i * ldx, rows[i], static_cast<std::size_t>(w.cols) * 2);
            rows[i] = reinterpret_cast<const std::byte*>(pad.data() + i * ldx);
        }
        const std::int64_t ahead = std::max<std::int64_t>(k_prefetch_bytes, k_prefetch_blocks * n * w.row_stride * 2);
        if (stream) block_native<n, G, true>(rows, x, ldx, ldx, y + (r - r0), ldy, ahead);
        else block_native<n, G, false>(rows, x, ldx, ldx, y + (r - r0), ldy, ahead);
    };
    std::int64_t r = r0;
    for (; r + R <= r1; r += R) block(std::integral_constant<int, R>{}, r);
    for (; r < r1; ++r) block(std::integral_constant<int, 1>{}, r);
}

// Vectors in tiles that stay in L2; within a tile, rows in blocks whose weights stay
// in L1 while every vector group of the tile passes over them (the first group
// streams them in). Groups are balanced (12 = 6 + 6, 16 = 8 + 8).
void rows_native(const tensor_view& w, std::int64_t r0, std::int64_t r1, const bf16_vectors& x, std::int64_t nvec,
                 float* y, std::int64_t ldy) {
    const std::int64_t tile = std::max<std::int64_t>(k_max_group, k_vector_tile_bytes / (x.ld * 2));
    for (std::int64_t t0 = 0; t0 < nvec; t0 += tile) {
        const std::int64_t t1 = std::min(nvec, t0 + tile);
        const std::int64_t max_group = t1 - t0 > k_prefill_vectors ? k_prefill_group : k_max_group;
        const std::int64_t groups = (t1 - t0 + max_group - 1) / max_group;
        for (std::int64_t b0 = r0; b0 < r1; b0 += k_row_block) {
            const std::int64_t b1 = std::min(r1, b0 + k_row_block);
            for (std::int64_t g = 0, v = t0; g < groups; ++g) {
                const std::int64_t count = (t1 - v + (groups - g) - 1) / (groups - g);
                const std::uint16_t* xv = x.data.data() + v * x.ld;
                float* yv = y + v * ldy + (b0 - r0);
                const bool stream = g == 0;
                switch (count) {
                    case 1: group_native<1>(w, b0, b1, xv, x.ld, stream, yv, ldy); break;
                    case 2: group_native<2>(w, b0, b1, xv, x.ld, stream, yv, ldy); break;
                    case 3: group_native<3>(w, b0, b1, xv, x.ld, stream, yv, ldy); break;
                    case 4: group_native<4>(w, b0, b1, xv, x.ld, stream, yv, ldy); break;
                    case 5: group_native<5>(w, b0, b1, xv, x.ld, stream, yv, ldy); break;
                    case 6: group_native<6>(w, b0, b1, xv, x.ld, stream, yv, ldy); break;
                    case 7: group_native<7>(w, b0, b1, xv, x.ld, stream, yv, ldy); break;
                    default: group_native<8>(w, b0, b1, xv, x.ld, stream, yv, ldy); break;
                }
                v += count;
            }
        }
    }
}

}  // namespace

const char* to_string(arithmetic a) { return a == arithmetic::bf16 ? "bf16" : "fp32"; }

std::optional<arithmetic> parse_arithmetic(std::string_view s) {
    if (s == "fp32") return arithmetic::fp32;
    if (s == "bf16") return arithmetic::bf16;
    return std::nullopt;
}

bool bf16_products_native() { return g_native_allowed.load(std::memory_order_relaxed) && cpu_has_avx512_bf16(); }
void allow_bf16_products_native(bool allowed) { g_native_allowed.store(allowed, std::memory_order_relaxed); }

namespace {

void size_vectors_bf16(std::int64_t nvec, std::int64_t n, bf16_vectors& out) {
    out.n = n;
    out.ld = (n + k_step - 1) / k_step * k_step;
    out.data.resize(static_cast<std::size_t>(nvec * out.ld));
}

// Vectors [v0, v1) of an already sized `out`.
void round_vectors_range(const float* x, std::int64_t v0, std::int64_t v1, std::int64_t ldx, bf16_vectors& out) {
    const std::int64_t n = out.n;
    for (std::int64_t v = v0; v < v1; ++v) {
        std::uint16_t* o = out.data.data() + v * out.ld;
        f32_to_bf16(std::span(x + v * ldx, static_cast<std::size_t>(n)), std::span(o, static_cast<std::size_t>(n)));
        for (std::int64_t i = 0; i < n; ++i)
            if ((o[i] & 0x7f80u) == 0) o[i] &= 0x8000u;  // the instruction reads subnormals as zero
        std::fill(o + n, o + out.ld, std::uint16_t{0});
    }
}

}  // namespace

void round_vectors_bf16(const float* x, std::int64_t nvec, std::int64_t ldx, std::int64_t n, bf16_vectors& out) {
    size_vectors_bf16(nvec, n, out);
    round_vectors_range(x, 0, nvec, ldx, out);
}

void round_vectors_bf16(thread_pool& pool, const float* x, std::int64_t nvec, std::int64_t ldx, std::int64_t n,
                        bf16_vectors& out) {
    size_vectors_bf16(nvec, n, out);
    pool.parallel_for(nvec, 1, nvec * n * k_vector_work, [&](std::int64_t b, std::int64_t e) {
        round_vectors_range(x, b, e, ldx, out);
    });
}

void dot_rows_bf16_products(const tensor_view& w, std::int64_t r0, std::int64_t r1, const bf16_vectors& x,
                            std::int64_t nvec, float* y, std::int64_t ldy) {
    if (bf16_products_native()) return rows_native(w, r0, r1, x, nvec, y, ldy);
    rows_emulated(w, r0, r1, x, nvec, y, ldy);
}

}  // namespace calserve::model
