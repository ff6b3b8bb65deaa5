// Stored rows to FP32; see stored_rows.hpp.
#include "model/weights/stored_rows.hpp"

namespace calserve::model {
namespace {

using namespace stored;

template <dtype T>
void convert_rows_t(const tensor_view& w, std::int64_t r0, std::int64_t r1, float* out) {
    const std::int64_t n = w.cols, n8 = n & ~std::int64_t{7}, step = 8 * element_bytes(T);
    for (std::int64_t r = r0; r < r1; ++r, out += n) {
        const std::byte* p = w.row(r);
        for (std::int64_t k = 0, off = 0; k < n8; k += 8, off += step) _mm256_storeu_ps(out + k, load8<T>(p + off));
        for (std::int64_t k = n8; k < n; ++k) out[k] = load1<T>(p, k);
    }
}

void convert_rows_q8(const tensor_view& w, std::int64_t r0, std::int64_t r1, float* out) {
    const std::int64_t nb = w.cols / q8_block;
    for (std::int64_t r = r0; r < r1; ++r) {
        const std::byte* p = w.row(r);
        for (std::int64_t b = 0; b < nb; ++b, out += q8_block) {
            const std::byte* blk = p + b * q8_block_bytes;
            const __m256 d = _mm256_set1_ps(q8_block_scale(blk));
            for (int i = 0; i < 4; ++i) {
                const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * i));
                _mm256_storeu_ps(out + 8 * i, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
            }
        }
    }
}

}  // namespace

void convert_rows_to_f32(const tensor_view& w, std::int64_t r0, std::int64_t r1, float* out) {
    switch (w.type) {
        case dtype::f32: return convert_rows_t<dtype::f32>(w, r0, r1, out);
        case dtype::bf16: return convert_rows_t<dtype::bf16>(w, r0, r1, out);
        case dtype::f16: return convert_rows_t<dtype::f16>(w, r0, r1, out);
        case dtype::q8_0: return convert_rows_q8(w, r0, r1, out);
    }
}

}  // namespace calserve::model
