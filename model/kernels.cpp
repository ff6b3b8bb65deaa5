// AVX2/FMA dot-product and element-wise kernels; see kernels.hpp.
#include "model/kernels.hpp"

#include <immintrin.h>

#include <cmath>
#include <cstring>

namespace calserve::model {
namespace {

inline float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v);
    __m128 hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 0x55));
    return _mm_cvtss_f32(lo);
}

// Loads 8 consecutive weights of dtype T as FP32 lanes.
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

template <dtype T>
inline float load1(const std::byte* p, std::int64_t i) {
    if constexpr (T == dtype::f32) {
        float v;
        std::memcpy(&v, p + i * 4, 4);
        return v;
    } else {
        std::uint16_t v;
        std::memcpy(&v, p + i * 2, 2);
        return T == dtype::bf16 ? bf16_bits_to_f32(v) : f16_bits_to_f32(v);
    }
}

constexpr std::int64_t esize(dtype t) { return t == dtype::f32 ? 4 : 2; }

// One row at a time, four accumulators: a single sequential stream per thread
// reaches the memory read rate, while interleaving several rows (sharing loads
// of x) measured 2-3x slower on the target CPUs.
template <dtype T>
void dot_rows_t(const tensor_view& w, std::int64_t r0, std::int64_t r1, const float* x, float* y) {
    const std::int64_t n = w.cols, n32 = n & ~std::int64_t{31}, n8 = n & ~std::int64_t{7};
    constexpr std::int64_t es = esize(T);
    for (std::int64_t r = r0; r < r1; ++r) {
        const std::byte* p = w.row(r);
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        std::int64_t k = 0;
        for (; k < n32; k += 32) {
            a0 = _mm256_fmadd_ps(load8<T>(p + k * es), _mm256_loadu_ps(x + k), a0);
            a1 = _mm256_fmadd_ps(load8<T>(p + (k + 8) * es), _mm256_loadu_ps(x + k + 8), a1);
            a2 = _mm256_fmadd_ps(load8<T>(p + (k + 16) * es), _mm256_loadu_ps(x + k + 16), a2);
            a3 = _mm256_fmadd_ps(load8<T>(p + (k + 24) * es), _mm256_loadu_ps(x + k + 24), a3);
        }
        for (; k < n8; k += 8) a0 = _mm256_fmadd_ps(load8<T>(p + k * es), _mm256_loadu_ps(x + k), a0);
        float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        for (; k < n; ++k) s += load1<T>(p, k) * x[k];
        y[r - r0] = s;
    }
}

// NV activation vectors against each weight row: the row is read once.
template <dtype T, int NV>
void dot_rows_multi_t(const tensor_view& w, std::int64_t r0, std::int64_t r1, const float* x, std::int64_t ldx,
                      float* y, std::int64_t ldy) {
    // Small NV: two accumulator sets so FMA latency does not bound the loop.
    constexpr int sets = NV <= 4 ? 2 : 1;
    const std::int64_t n = w.cols, step = 8 * sets, nmain = n - n % step;
    constexpr std::int64_t es = esize(T);
    for (std::int64_t r = r0; r < r1; ++r) {
        const std::byte* p = w.row(r);
        __m256 acc[sets][NV];
        for (int s = 0; s < sets; ++s)
            for (int v = 0; v < NV; ++v) acc[s][v] = _mm256_setzero_ps();
        for (std::int64_t k = 0; k < nmain; k += step)
            for (int s = 0; s < sets; ++s) {
                const std::int64_t kk = k + 8 * s;
                __m256 wv = load8<T>(p + kk * es);
                for (int v = 0; v < NV; ++v) acc[s][v] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + v * ldx + kk), acc[s][v]);
            }
        for (int v = 0; v < NV; ++v) {
            __m256 t = acc[0][v];
            for (int s = 1; s < sets; ++s) t = _mm256_add_ps(t, acc[s][v]);
            float sum = hsum(t);
            for (std::int64_t k = nmain; k < n; ++k) sum += load1<T>(p, k) * x[v * ldx + k];
            y[v * ldy + (r - r0)] = sum;
        }
    }
}

template <dtype T>
void dot_rows_multi_dispatch(const tensor_view& w, std::int64_t r0, std::int64_t r1, const float* x,
                             std::int64_t nvec, std::int64_t ldx, float* y, std::int64_t ldy) {
    switch (nvec) {
        case 1: return dot_rows_multi_t<T, 1>(w, r0, r1, x, ldx, y, ldy);
        case 2: return dot_rows_multi_t<T, 2>(w, r0, r1, x, ldx, y, ldy);
        case 3: return dot_rows_multi_t<T, 3>(w, r0, r1, x, ldx, y, ldy);
        case 4: return dot_rows_multi_t<T, 4>(w, r0, r1, x, ldx, y, ldy);
        case 5: return dot_rows_multi_t<T, 5>(w, r0, r1, x, ldx, y, ldy);
        case 6: return dot_rows_multi_t<T, 6>(w, r0, r1, x, ldx, y, ldy);
        case 7: return dot_rows_multi_t<T, 7>(w, r0, r1, x, ldx, y, ldy);
        default: return dot_rows_multi_t<T, 8>(w, r0, r1, x, ldx, y, ldy);
    }
}

template <dtype T>
void convert_rows_t(const tensor_view& w, std::int64_t r0, std::int64_t r1, float* out) {
    const std::int64_t n = w.cols, n8 = n & ~std::int64_t{7}, step = 8 * esize(T);
    for (std::int64_t r = r0; r < r1; ++r, out += n) {
        const std::byte* p = w.row(r);
        for (std::int64_t k = 0, off = 0; k < n8; k += 8, off += step) _mm256_storeu_ps(out + k, load8<T>(p + off));
        for (std::int64_t k = n8; k < n; ++k) out[k] = load1<T>(p, k);
    }
}

}  // namespace

float bf16_bits_to_f32(std::uint16_t v) {
    std::uint32_t bits = static_cast<std::uint32_t>(v) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

std::uint16_t f32_to_bf16_bits(float v) {
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40);  // quiet NaN
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<std::uint16_t>(bits >> 16);
}

float f16_bits_to_f32(std::uint16_t v) { return _cvtsh_ss(v); }
std::uint16_t f32_to_f16_bits(float v) { return _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT); }

void convert_rows_to_f32(const tensor_view& w, std::int64_t r0, std::int64_t r1, float* out) {
    switch (w.type) {
        case dtype::f32: return convert_rows_t<dtype::f32>(w, r0, r1, out);
        case dtype::bf16: return convert_rows_t<dtype::bf16>(w, r0, r1, out);
        case dtype::f16: return convert_rows_t<dtype::f16>(w, r0, r1, out);
    }
}

void dot_rows(const tensor_view& w, std::int64_t r0, std::int64_t r1, const float* x, float* y) {
    switch (w.type) {
        case dtype::f32: return dot_rows_t<dtype::f32>(w, r0, r1, x, y);
        case dtype::bf16: return dot_rows_t<dtype::bf16>(w, r0, r1, x, y);
        case dtype::f16: return dot_rows_t<dtype::f16>(w, r0, r1, x, y);
    }
}

void dot_rows_multi(const tensor_view& w, std::int64_t r0, std::int64_t r1, const float* x, std::int64_t nvec,
                    std::int64_t ldx, float* y, std::int64_t ldy) {
    switch (w.type) {
        case dtype::f32: return dot_rows_multi_dispatch<dtype::f32>(w, r0, r1, x, nvec, ldx, y, ldy);
        case dtype::bf16: return dot_rows_multi_dispatch<dtype::bf16>(w, r0, r1, x, nvec, ldx, y, ldy);
        case dtype::f16: return dot_rows_multi_dispatch<dtype::f16>(w, r0, r1, x, nvec, ldx, y, ldy);
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
