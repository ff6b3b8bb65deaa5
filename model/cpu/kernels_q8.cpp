// Q8_0 weights: activation quantisation and the int8 dot-product kernels; see kernels.hpp.
//
// A Q8_0 row is blocks of 32 int8 weights q_w with one FP16 scale d_w. The
// activation vector is quantised the same way (32 int8 q_x per block, an FP32
// scale d_x), once per linear call. One output (row r, vector v) is always the same
// computation: for each block b in order, the block's 32 integer products summed
// exactly into one int32 s_b, converted to FP32 (exact: |s_b| < 2^24) and
// multiply-added with the FP32 scale d_w * d_x into one FP32 accumulator:
//     acc = fma(float(s_b), d_w,b * d_x,b, acc),   acc starting at 0, y = acc.
// One FP32 chain per output and no horizontal sum, so a register can hold sixteen
// rows' chains side by side. Both forms below compute exactly that:
// - AVX2: maddubs on |q_w| and sign-adjusted q_x, madd into int32 (exact: pair sums
//   stay below 2^15); eight rows at a time, their eight lanes summed as integers into
//   one register (row i in lane i), so eight chains step side by side (a row left
//   over steps alone, the same arithmetic);
// - AVX512_VNNI: weight rows interleaved in panels of 16 (per block: for each 4-byte
//   group j the 16 rows' bytes 4j..4j+3 side by side, offset to unsigned, then the 16
//   rows' scales), in row blocks of 8 panels laid out in the order a one-vector pass
//   reads them (one sequential stream); eight `vpdpbusd` (each against one broadcast
//   4-byte group of q_x, starting from -128 x sum(q_x)) give the 16 rows' s_b in one
//   register, so the convert, the scale multiply and the FMA are paid once per 512
//   products. A model's matrices are packed once at load (q8_panels_pin); any other
//   view is packed per call, a row block at a time, into a buffer every vector group
//   re-reads. Register-blocked: 8 panels x 1 vector, 4 x 2, 2 x 3-4, 1 x 5-8.
// Nothing in either depends on how many rows or vectors share a call: row-exact.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <type_traits>

#include "model/cpu/kernels.hpp"
#include "model/weights/stored_rows.hpp"

namespace calserve::model {
namespace {

constexpr std::int64_t k_block = stored::q8_block, k_block_bytes = stored::q8_block_bytes;
constexpr std::int64_t k_group = 4;               // AVX2: vectors per pass
constexpr std::int64_t k_tile_bytes = 32 << 10;  // weight rows revisited by every group stay in cache

inline float block_scale(const std::byte* blk) { return stored::q8_block_scale(blk); }

// The products q_w x q_x of 32 int8 pairs, summed per 4-byte group into 8 int32 lanes (exact:
// maddubs on |q_w| and the sign-adjusted q_x, whose pair sums stay below 2^15).
inline __m256i group_products(__m256i w, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)),
                             _mm256_set1_epi16(1));
}

// The sum of 8 int32 lanes (exact).
inline std::int32_t sum_lanes(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

// One step of an output's chain: acc + float(isum) x (dw x dx), one rounding for the scale, one for the FMA.
inline float chain_step(float acc, std::int32_t isum, float dw, float dx) {
    const __m128 s = _mm_mul_ss(_mm_set_ss(dw), _mm_set_ss(dx));
    return _mm_cvtss_f32(_mm_fmadd_ss(_mm_cvtsi32_ss(_mm_setzero_ps(), isum), s, _mm_set_ss(acc)));
}

// Eight rows' block sums (eight int32 lanes each) as one vector of their totals, row i in lane i (exact).
inline __m256i sum_eight(const __m256i (&s)[8]) {
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
    const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
    // a: rows 0-3's sums of bytes 0-15 | of bytes 16-31; b the same for rows 4-7.
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// Rows [r, r + 8) x NV vectors from v0: eight chains per vector side by side, lane i row r + i.
template <int NV>
void q8_eight_rows(const tensor_view& w, std::int64_t r, const q8_vectors& xq, std::int64_t v0, float* y,
                   std::int64_t ldy) {
    const std::int64_t nb = w.cols / k_block;
    const std::byte* rows[8];
    for (int i = 0; i < 8; ++i) rows[i] = w.row(r + i);
    __m256 acc[NV];
    for (int v = 0; v < NV; ++v) acc[v] = _mm256_setzero_ps();
    // Eight short row streams at once are more than the hardware prefetcher follows
    // (batch 1 0.55x the one-row-at-a-time pass without this): the next eight rows'
    // span, read in order, a share of it with each block step.
    const std::byte* next = rows[0] + 8 * (w.row(1) - w.row(0));
    const std::int64_t share = 8 * (w.row(1) - w.row(0)) / nb;
    for (std::int64_t b = 0; b < nb; ++b) {
        for (std::int64_t at = b * share; at < (b + 1) * share; at += 64)
            _mm_prefetch(reinterpret_cast<const char*>(next + at), _MM_HINT_T0);
        alignas(16) std::uint16_t h[8];
        for (int i = 0; i < 8; ++i) std::memcpy(&h[i], rows[i] + b * k_block_bytes, 2);
        const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
        for (int v = 0; v < NV; ++v) {
            const std::int64_t at = (v0 + v) * nb + b;
            const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq.q.data() + at * k_block));
            __m256i s[8];
            for (int i = 0; i < 8; ++i) {
                const __m256i wq =
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[i] + b * k_block_bytes + 2));
                s[i] = group_products(wq, x);
            }
            const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(xq.d[static_cast<std::size_t>(at)]));
            acc[v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum_eight(s)), sc, acc[v]);
        }
    }
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(y + v * ldy, acc[v]);
}

// Rows [r0, r1) x NV vectors: eight rows at a time, the rest one by one (the same chains).
template <int NV>
void q8_group(const tensor_view& w, std::int64_t r0, std::int64_t r1, const q8_vectors& xq, std::int64_t v0,
              float* y, std::int64_t ldy) {
    const std::int64_t nb = w.cols / k_block;
    std::int64_t r = r0;
    for (; r + 8 <= r1; r += 8) q8_eight_rows<NV>(w, r, xq, v0, y + (r - r0), ldy);
    for (; r < r1; ++r) {
        const std::byte* p = w.row(r);
        float acc[NV] = {};
        for (std::int64_t b = 0; b < nb; ++b) {
            const std::byte* blk = p + b * k_block_bytes;
            const float dw = block_scale(blk);
            const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
            for (int v = 0; v < NV; ++v) {
                const std::int64_t at = (v0 + v) * nb + b;
                const auto* xb = reinterpret_cast<const __m256i*>(xq.q.data() + at * k_block);
                acc[v] = chain_step(acc[v], sum_lanes(group_products(wq, _mm256_loadu_si256(xb))), dw,
                                    xq.d[static_cast<std::size_t>(at)]);
            }
        }
        for (int v = 0; v < NV; ++v) y[v * ldy + (r - r0)] = acc[v];
    }
}

void rows_avx2(const tensor_view& w, std::int64_t r0, std::int64_t r1, const q8_vectors& xq, std::int64_t nvec,
               float* y, std::int64_t ldy) {
    const std::int64_t row_bytes = std::max<std::int64_t>(1, w.cols / k_block * k_block_bytes);
    const std::int64_t tile = std::max<std::int64_t>(8, k_tile_bytes / row_bytes / 8 * 8);  // whole eights
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

// ---- AVX512_VNNI form: rows interleaved in panels of 16 ----

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

// Panels of 16 rows, each one contiguous stream: per pair of blocks (64 columns), block
// 2k's weights as 8 groups j (bytes 4j..4j+3) x 16 rows x 4 bytes (a cache line per
// group), block 2k + 1's the same, then the two blocks' 16 FP16 scales each: 1,088
// bytes per 16 rows x 64 columns, the stored bytes, every load on its own cache line. A
// micro-kernel of R panels reads R sequential streams.
constexpr int k_panel = 16;                           // rows per panel
constexpr std::int64_t k_pair_bytes = 2 * 512 + 2 * 32;
constexpr std::int64_t k_chunk_panels = 8;            // panels every vector group passes over in turn
constexpr int k_vnni_max_group = 8;                   // vectors per micro-kernel
// Panels per micro-kernel: 2 x panels x vectors accumulators (int32 block sums, FP32
// chains). One vector (decode): 8 panels, so 8 independent `vpdpbusd` chains hide its latency.
constexpr int vnni_panels_for(int g) { return g == 1 ? 8 : 1; }

constexpr std::int64_t panel_bytes(std::int64_t blocks) { return (blocks + 1) / 2 * k_pair_bytes; }
// Offsets in a panel of block b's weights and of its scales.
constexpr std::int64_t panel_weights_at(std::int64_t b) { return b / 2 * k_pair_bytes + b % 2 * 512; }
constexpr std::int64_t panel_scales_at(std::int64_t b) { return b / 2 * k_pair_bytes + 1024 + b % 2 * 32; }

// Rows [r, r + n) (n <= 16) of w, nb blocks, as the panel at dst; missing rows are zero.
void pack_panel(const tensor_view& w, std::int64_t r, std::int64_t n, std::int64_t nb, std::byte* dst) {
    for (std::int64_t i = 0; i < k_panel; ++i) {
        const std::byte* row = i < n ? w.row(r + i) : nullptr;
        for (std::int64_t b = 0; b < nb; ++b) {
            std::uint16_t scale = 0;
            std::uint32_t q[8] = {};
            if (row != nullptr) {
                std::memcpy(&scale, row + b * k_block_bytes, 2);
                std::memcpy(q, row + b * k_block_bytes + 2, sizeof q);
            }
            std::memcpy(dst + panel_scales_at(b) + i * 2, &scale, 2);
            for (int j = 0; j < 8; ++j) {
                const std::uint32_t u = q[j] ^ 0x80808080u;  // q + 128 in each byte
                std::memcpy(dst + panel_weights_at(b) + j * 64 + i * 4, &u, 4);
            }
        }
    }
}

#define CALSERVE_VNNI_ISA __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// R panels from `panels` (`stride` bytes apart, their blocks from cb on) x G vectors from
// v0. Lane l of panel r is output row start + 16 r + l, stored when in [0, rows).
template <int R, int G>
CALSERVE_VNNI_ISA void panels_vnni(const std::byte* panels, std::int64_t stride, std::int64_t cb,
                                   const q8_vectors& xq, std::int64_t v0, float* y, std::int64_t ldy,
                                   std::int64_t start, std::int64_t rows) {
    const std::int64_t nb = xq.blocks;
    __m512 acc[R][G];
    for (int r = 0; r < R; ++r)
        for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
    for (std::int64_t b = 0; b < nb; ++b) {
        const std::byte* pw = panels + panel_weights_at(cb + b);
        __m512i s[R][G];
        for (int g = 0; g < G; ++g) {
            const __m512i c = _mm512_set1_epi32(xq.bsum[static_cast<std::size_t>((v0 + g) * nb + b)]);
            for (int r = 0; r < R; ++r) s[r][g] = c;
        }
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            __m512i wv[R];
            // Five vectors or more: the next panel's line into L2 as this one's is read (batch 8
            // and 16 1.25-1.32x; at batch 4 and below the hardware prefetcher does better).
            if constexpr (G > 4) _mm_prefetch(reinterpret_cast<const char*>(pw + R * stride + j * 64), _MM_HINT_T2);
            for (int r = 0; r < R; ++r) wv[r] = _mm512_loadu_si512(pw + r * stride + j * 64);
            for (int g = 0; g < G; ++g) {
                std::int32_t xw;
                std::memcpy(&xw, xq.q.data() + ((v0 + g) * nb + b) * k_block + 4 * j, 4);
                const __m512i xb = _mm512_set1_epi32(xw);
                for (int r = 0; r < R; ++r) s[r][g] = _mm512_dpbusd_epi32(s[r][g], wv[r], xb);
            }
        }
        for (int r = 0; r < R; ++r) {
            const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(panels + r * stride + panel_scales_at(cb + b))));
            for (int g = 0; g < G; ++g) {
                const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(xq.d[static_cast<std::size_t>((v0 + g) * nb + b)]));
                acc[r][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r][g]), sc, acc[r][g]);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        const std::int64_t at = start + r * k_panel;  // the output row of lane 0
        const std::int64_t lo = std::max<std::int64_t>(0, -at), hi = std::min<std::int64_t>(k_panel, rows - at);
        if (hi <= lo) continue;
        if (lo == 0) {
            const auto m = static_cast<__mmask16>((1u << hi) - 1u);
            for (int g = 0; g < G; ++g) _mm512_mask_storeu_ps(y + g * ldy + at, m, acc[r][g]);
            continue;
        }
        // A range starting inside the panel (rare: a view or range off a panel).
        alignas(64) float lanes[k_panel];
        for (int g = 0; g < G; ++g) {
            _mm512_store_ps(lanes, acc[r][g]);
            std::memcpy(y + g * ldy + at + lo, lanes + lo, static_cast<std::size_t>(hi - lo) * sizeof(float));
        }
    }
}

#pragma GCC diagnostic pop

// np panels from `panels` against G vectors from v0, R panels per micro-kernel; the
// first panel's lane `skip` is output row 0, `rows` rows wanted.
template <int G>
void group_vnni(const std::byte* panels, std::int64_t stride, std::int64_t cb, std::int64_t np, std::int64_t skip,
                std::int64_t rows, const q8_vectors& xq, std::int64_t v0, float* y, std::int64_t ldy) {
    constexpr int R = vnni_panels_for(G);
    std::int64_t p = 0;
    for (; p + R <= np; p += R)
        panels_vnni<R, G>(panels + p * stride, stride, cb, xq, v0, y, ldy, p * k_panel - skip, rows);
    for (; p < np; ++p) panels_vnni<1, G>(panels + p * stride, stride, cb, xq, v0, y, ldy, p * k_panel - skip, rows);
}

// Matrices pinned (q8_panels_pin), by the address of their first byte: their panels,
// in a copy or in the matrix's own bytes.
struct packed_matrix {
    const std::byte* data = nullptr;
    std::int64_t rows = 0, blocks = 0, row_bytes = 0;  // row_bytes: the stored stride
    const std::byte* panels = nullptr;
    simd_vector<std::byte> copy;  // empty when packed in place
};
std::shared_mutex g_packed_mutex;
std::mutex g_pin_mutex;  // one pin at a time (loads are rare); the kernels take only g_packed_mutex
std::map<const std::byte*, std::shared_ptr<const packed_matrix>> g_packed;

// Where view w lies in a pinned matrix: its first row and first block there.
struct packed_place {
    const packed_matrix* m = nullptr;
    std::int64_t row = 0, block = 0;
};

// A view inside a pinned matrix (the matrix, a row slice or a column slice of it, with its
// stride), or nothing.
packed_place find_packed(const tensor_view& w) {
    std::shared_lock lock(g_packed_mutex);
    auto it = g_packed.upper_bound(w.data);
    if (it == g_packed.begin()) return {};
    const packed_matrix& m = *(--it)->second;
    const std::int64_t offset = w.data - m.data;
    const std::int64_t row_bytes = w.row_stride / k_block * k_block_bytes;
    if (row_bytes != m.row_bytes || offset >= m.rows * m.row_bytes) return {};
    const packed_place at{&m, offset / row_bytes, offset % row_bytes / k_block_bytes};
    const bool inside = offset % row_bytes % k_block_bytes == 0 && at.row + w.rows <= m.rows &&
                        at.block + w.cols / k_block <= m.blocks;
    return inside ? at : packed_place{};
}

// Rows in chunks of 8 panels (a pinned matrix's panels from the one holding r0, or
// packed now into this thread's buffer), then every vector group (balanced: 16 = 8 + 8,
// 12 = 6 + 6) over a chunk, which stays in L2 after the first.
void rows_vnni(const tensor_view& w, const packed_place& packed, std::int64_t r0, std::int64_t r1,
               const q8_vectors& xq, std::int64_t nvec, float* y, std::int64_t ldy) {
    thread_local simd_vector<std::byte> buffer;
    const std::int64_t nb = xq.blocks;
    const std::int64_t stride = panel_bytes(packed.m != nullptr ? packed.m->blocks : nb);
    if (packed.m == nullptr) buffer.resize(static_cast<std::size_t>(k_chunk_panels * stride));
    const std::int64_t groups = (nvec + k_vnni_max_group - 1) / k_vnni_max_group;
    for (std::int64_t b0 = r0; b0 < r1;) {
        const std::byte* panels = buffer.data();
        std::int64_t skip = 0;
        if (packed.m != nullptr) {
            const std::int64_t g = packed.row + b0;  // the matrix's row
            panels = packed.m->panels + g / k_panel * stride;
            skip = g % k_panel;
        }
        const std::int64_t rows = std::min(r1 - b0, k_chunk_panels * k_panel - skip);
        const std::int64_t np = (skip + rows + k_panel - 1) / k_panel;
        for (std::int64_t p = 0; packed.m == nullptr && p < np; ++p)
            pack_panel(w, b0 + p * k_panel, std::min<std::int64_t>(k_panel, rows - p * k_panel), nb,
                       buffer.data() + p * stride);
        for (std::int64_t g = 0, v = 0; g < groups; ++g) {
            const std::int64_t count = (nvec - v + (groups - g) - 1) / (groups - g);
            float* yv = y + v * ldy + (b0 - r0);
            auto run = [&](auto group) {
                group_vnni<decltype(group)::value>(panels, stride, packed.block, np, skip, rows, xq, v, yv, ldy);
            };
            switch (count) {
                case 1: run(std::integral_constant<int, 1>{}); break;
                case 2: run(std::integral_constant<int, 2>{}); break;
                case 3: run(std::integral_constant<int, 3>{}); break;
                case 4: run(std::integral_constant<int, 4>{}); break;
                case 5: run(std::integral_constant<int, 5>{}); break;
                case 6: run(std::integral_constant<int, 6>{}); break;
                case 7: run(std::integral_constant<int, 7>{}); break;
                default: run(std::integral_constant<int, 8>{}); break;
            }
            v += count;
        }
        b0 += rows;
    }
}

// The AVX2 form over a pinned matrix's panels (when the VNNI form is not allowed: the rows
// may be rearranged in place). Half a panel (8 rows) x NV vectors from v0: per 4-byte
// group j, 8 rows' bytes in one register (offset back to signed) against q_x's bytes
// 4j..4j+3 broadcast, the same exact block sums and chains as the VNNI form.
template <int NV>
void half_panel_avx2(const std::byte* panel, std::int64_t half, std::int64_t cb, const q8_vectors& xq,
                     std::int64_t v0, float* out) {
    const std::int64_t nb = xq.blocks;
    const __m256i offset = _mm256_set1_epi8(static_cast<char>(0x80));
    __m256 acc[NV];
    for (int v = 0; v < NV; ++v) acc[v] = _mm256_setzero_ps();
    for (std::int64_t b = 0; b < nb; ++b) {
        const std::byte* pw = panel + panel_weights_at(cb + b) + half * 32;
        __m256i wq[8];
        for (int j = 0; j < 8; ++j)
            wq[j] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pw + j * 64)), offset);
        const __m256 dw = _mm256_cvtph_ps(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(panel + panel_scales_at(cb + b) + half * 16)));
        for (int v = 0; v < NV; ++v) {
            const std::int64_t at = (v0 + v) * nb + b;
            __m256i s = _mm256_setzero_si256();
            for (int j = 0; j < 8; ++j) {
                std::int32_t xw;
                std::memcpy(&xw, xq.q.data() + at * k_block + 4 * j, 4);
                const __m256i x = _mm256_set1_epi32(xw);
                s = _mm256_add_epi32(s, group_products(wq[j], x));
            }
            const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(xq.d[static_cast<std::size_t>(at)]));
            acc[v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), sc, acc[v]);
        }
    }
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(out + v * 8, acc[v]);
}

void rows_avx2_panels(const packed_place& packed, std::int64_t r0, std::int64_t r1, const q8_vectors& xq,
                      std::int64_t nvec, float* y, std::int64_t ldy) {
    const std::int64_t stride = panel_bytes(packed.m->blocks);
    float out[k_group * 8];
    for (std::int64_t h0 = (packed.row + r0) / 8 * 8; h0 < packed.row + r1; h0 += 8) {  // the matrix's rows
        const std::byte* panel = packed.m->panels + h0 / k_panel * stride;
        const std::int64_t lo = std::max(h0, packed.row + r0), hi = std::min(h0 + 8, packed.row + r1);
        for (std::int64_t v = 0; v < nvec; v += k_group) {
            const std::int64_t count = std::min(k_group, nvec - v);
            switch (count) {
                case 1: half_panel_avx2<1>(panel, h0 % k_panel / 8, packed.block, xq, v, out); break;
                case 2: half_panel_avx2<2>(panel, h0 % k_panel / 8, packed.block, xq, v, out); break;
                case 3: half_panel_avx2<3>(panel, h0 % k_panel / 8, packed.block, xq, v, out); break;
                default: half_panel_avx2<4>(panel, h0 % k_panel / 8, packed.block, xq, v, out); break;
            }
            for (std::int64_t i = 0; i < count; ++i)
                std::memcpy(y + (v + i) * ldy + (lo - packed.row - r0), out + i * 8 + (lo - h0),
                            static_cast<std::size_t>(hi - lo) * sizeof(float));
        }
    }
}

// -128 x (sum of a block's 32 int8 values), the VNNI form's starting value (maddubs of 128 and q_x is exact).
std::int32_t vnni_start(const __m256i bytes) {
    const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(static_cast<char>(0x80)), bytes);
    return -sum_lanes(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)));
}

}  // namespace

namespace {

// Rows [r, r + n) of the rows at `rows` (row_bytes apart, nb blocks) back from the panel at src.
void unpack_panel(const std::byte* src, std::int64_t n, std::int64_t nb, std::byte* rows, std::int64_t row_bytes) {
    for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t b = 0; b < nb; ++b) {
            std::byte* blk = rows + i * row_bytes + b * k_block_bytes;
            std::memcpy(blk, src + panel_scales_at(b) + i * 2, 2);
            for (int j = 0; j < 8; ++j) {
                std::uint32_t u;
                std::memcpy(&u, src + panel_weights_at(b) + j * 64 + i * 4, 4);
                u ^= 0x80808080u;
                std::memcpy(blk + 2 + 4 * j, &u, 4);
            }
        }
}

}  // namespace

std::shared_ptr<const void> q8_panels_pin(const tensor_view& w, std::byte* own) {
    if (w.type != dtype::q8_0 || w.rows <= 0 || w.cols <= 0 || !cpu_has_avx512_vnni()) return nullptr;
    auto p = std::make_shared<packed_matrix>();
    p->data = w.data;
    p->rows = w.rows;
    p->blocks = w.cols / k_block;
    p->row_bytes = w.row_stride / k_block * k_block_bytes;
    const std::int64_t np = (w.rows + k_panel - 1) / k_panel, stride = panel_bytes(p->blocks);
    // In place when the panels take exactly the rows' bytes: whole panels, whole block
    // pairs, rows back to back.
    const bool in_place = own == w.data && w.rows % k_panel == 0 && p->blocks % 2 == 0 && w.row_stride == w.cols;
    std::lock_guard pinning(g_pin_mutex);  // no second pin of these bytes while they are packed
    {
        std::shared_lock lock(g_packed_mutex);
        if (g_packed.contains(w.data)) return nullptr;  // already pinned (a tied matrix)
    }
    // Packed without the kernels' lock: kernels of other models (a generation serving while
    // this one loads) keep reading their panels meanwhile; nothing reads these bytes yet.
    if (in_place) {
        simd_vector<std::byte> rows(static_cast<std::size_t>(stride));
        for (std::int64_t i = 0; i < np; ++i) {
            std::byte* at = own + i * stride;  // = row 16 i
            std::memcpy(rows.data(), at, static_cast<std::size_t>(stride));
            const tensor_view panel_rows{dtype::q8_0, k_panel, w.cols, w.cols, rows.data()};
            pack_panel(panel_rows, 0, k_panel, p->blocks, at);
        }
        p->panels = own;
    } else {
        p->copy.assign(static_cast<std::size_t>(np * stride), std::byte{0x80});
        for (std::int64_t i = 0; i < np; ++i)
            pack_panel(w, i * k_panel, std::min<std::int64_t>(k_panel, w.rows - i * k_panel), p->blocks,
                       p->copy.data() + i * stride);
        p->panels = p->copy.data();
    }
    {
        std::unique_lock lock(g_packed_mutex);
        g_packed.emplace(w.data, p);
    }
    return std::shared_ptr<const void>(p.get(), [p, own, in_place](const void*) {
        std::lock_guard pinning(g_pin_mutex);
        {
            std::unique_lock lock(g_packed_mutex);
            g_packed.erase(p->data);
        }
        if (!in_place) return;
        const std::int64_t bytes = panel_bytes(p->blocks);
        simd_vector<std::byte> panel(static_cast<std::size_t>(bytes));
        for (std::int64_t i = 0; i < p->rows / k_panel; ++i) {  // the rows back as they were
            std::memcpy(panel.data(), own + i * bytes, static_cast<std::size_t>(bytes));
            unpack_panel(panel.data(), k_panel, p->blocks, own + i * bytes, p->row_bytes);
        }
    });
}

void row_to_f32(const tensor_view& w, std::int64_t r, float* out) {
    const packed_place packed = w.type == dtype::q8_0 ? find_packed(w) : packed_place{};
    if (packed.m == nullptr) return convert_row_to_f32(w, r, out);
    const std::int64_t row = packed.row + r;
    const std::byte* panel = packed.m->panels + row / k_panel * panel_bytes(packed.m->blocks);
    const std::int64_t i = row % k_panel;
    for (std::int64_t b = 0; b < w.cols / k_block; ++b, out += k_block) {
        const std::int64_t gb = packed.block + b;
        std::uint16_t h;
        std::memcpy(&h, panel + panel_scales_at(gb) + i * 2, 2);
        const __m256 d = _mm256_cvtph_ps(_mm_cvtsi32_si128(h));
        const __m256 scale = _mm256_permutevar8x32_ps(d, _mm256_setzero_si256());
        for (int j = 0; j < 8; j += 2) {  // two 4-byte groups: 8 weights, offset back to signed
            std::uint32_t u[2];
            std::memcpy(&u[0], panel + panel_weights_at(gb) + j * 64 + i * 4, 4);
            std::memcpy(&u[1], panel + panel_weights_at(gb) + (j + 1) * 64 + i * 4, 4);
            const __m128i q = _mm_xor_si128(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(u)), _mm_set1_epi8(-128));
            _mm256_storeu_ps(out + 4 * j, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
        }
    }
}

bool q8_dot_vnni() { return g_vnni_allowed.load(std::memory_order_relaxed) && cpu_has_avx512_vnni(); }
void allow_q8_dot_vnni(bool allowed) { g_vnni_allowed.store(allowed, std::memory_order_relaxed); }

namespace {

void size_vectors_q8(std::int64_t nvec, std::int64_t n, q8_vectors& out) {
    const std::int64_t nb = n / k_block;
    out.blocks = nb;
    out.q.resize(static_cast<std::size_t>(nvec * nb * k_block));
    out.d.resize(static_cast<std::size_t>(nvec * nb));
    out.bsum.resize(static_cast<std::size_t>(nvec * nb));
}

// Vectors [v0, v1) of an already sized `out`.
void quantize_range(const float* x, std::int64_t v0, std::int64_t v1, std::int64_t ldx, q8_vectors& out) {
    const std::int64_t nb = out.blocks;
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
            out.bsum[static_cast<std::size_t>(at)] = vnni_start(bytes);
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
    const packed_place packed = find_packed(w);
    if (q8_dot_vnni()) return rows_vnni(w, packed, r0, r1, xq, nvec, y, ldy);
    if (packed.m != nullptr) return rows_avx2_panels(packed, r0, r1, xq, nvec, y, ldy);
    rows_avx2(w, r0, r1, xq, nvec, y, ldy);
}

}  // namespace calserve::model
