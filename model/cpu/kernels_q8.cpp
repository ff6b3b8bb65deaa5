// Q8_0 weights: activation quantisation and the int8 dot-product kernel; see kernels.hpp.
//
// A Q8_0 row is blocks of 32 int8 weights q_w with one FP16 scale d_w. The
// activation vector is quantised the same way (32 int8 q_x per block, an FP32
// scale d_x), once per linear call, and each block contributes
// d_w * d_x * sum(q_w * q_x): the integer sum is exact (AVX2 maddubs on |q_w| and
// sign-adjusted q_x, then madd into 8 int32 lanes), the scale is applied per block
// in FP32. Two FP32 accumulators per vector (even and odd blocks) in a fixed order,
// so a vector's result does not depend on how many vectors share the pass.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "model/cpu/kernels.hpp"
#include "model/weights/stored_rows.hpp"

namespace calserve::model {
namespace {

constexpr std::int64_t k_block = stored::q8_block, k_block_bytes = stored::q8_block_bytes;
constexpr std::int64_t k_group = 4;               // vectors per pass (4 x 2 accumulators)
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

}  // namespace

void quantize_vectors_q8(const float* x, std::int64_t nvec, std::int64_t ldx, std::int64_t n, q8_vectors& out) {
    const std::int64_t nb = n / k_block;
    out.blocks = nb;
    out.q.resize(static_cast<std::size_t>(nvec * nb * k_block));
    out.d.resize(static_cast<std::size_t>(nvec * nb));
    const __m256 sign_mask = _mm256_set1_ps(-0.0f);
    for (std::int64_t v = 0; v < nvec; ++v) {
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
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q.data() + (v * nb + b) * k_block), bytes);
            out.d[static_cast<std::size_t>(v * nb + b)] = d;
        }
    }
}

void dot_rows_q8(const tensor_view& w, std::int64_t r0, std::int64_t r1, const q8_vectors& xq, std::int64_t nvec,
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

}  // namespace calserve::model
