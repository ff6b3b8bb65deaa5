#pragma once
//! Numeric kernels of the reference transformer (AVX2/FMA/F16C).
//!
//! Role: the inner loops: dtype conversions, dot products of stored-dtype weight
//! rows (F32, BF16, F16) with FP32 activations, Q8_0 rows with int8-quantised
//! activations (int8 products, FP32 per-block scales; never dequantised), the row-parallel linear layer
//! (matvec for decode, a multi-vector kernel for batches that reads each weight
//! row from memory once and sums each vector exactly as the matvec does, so a
//! batch row's result never depends on its batch; OpenBLAS sgemm over converted
//! tiles for prefill of more than 16 tokens), RMSNorm,
//! rotary embedding (rotate-half), SiLU gating and softmax.
//!
//! Fault model: kernels do not fail; callers check shapes (CALSERVE_INVARIANT in
//! debug-sensitive spots). Accumulation is FP32. Invariant: `linear` writes
//! exactly t x w.rows outputs and reads exactly t x w.cols inputs.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "model/core/aligned.hpp"
#include "model/core/thread_pool.hpp"
#include "model/weights/stored_rows.hpp"
#include "model/weights/weights.hpp"

namespace calserve::model {


// y[i] = w.row(r0 + i) . x for rows [r0, r1).
void dot_rows(const tensor_view& w, std::int64_t r0, std::int64_t r1, const float* x, float* y);

// Y[v * ldy + r] = w.row(r) . X[v * ldx ...] for rows [r0, r1), v < nvec (any nvec).
// Row-exact: Y[v] equals dot_rows on vector v alone, bit for bit. BF16 weights on
// AVX-512 run 3 rows x 4 vectors per micro-kernel (each output still its one chain).
void dot_rows_multi(const tensor_view& w, std::int64_t r0, std::int64_t r1, const float* x, std::int64_t nvec,
                    std::int64_t ldx, float* y, std::int64_t ldy);

// Whether the BF16 dot kernels (dot_rows, dot_rows_multi, linear) run their AVX-512
// form: on a CPU with AVX-512F unless disallowed. Both forms give the same bits;
// tests compare them, benchmarks time them.
bool bf16_dot_avx512();
void allow_bf16_dot_avx512(bool allowed);

// How the dot products with BF16-stored weights round their inputs (issue 28).
// `fp32`: activations stay FP32 and weights widen exactly: the exact mode.
// `bf16`: activations are rounded to BF16 (nearest even, subnormals to zero) once per
// linear call and every product of two BF16 values is accumulated in FP32 by the
// CPU's BF16 dot-product instruction (`vdpbf16ps`: per FP32 lane, the odd pair's exact
// product is added and rounded, then the even pair's; subnormal inputs and results
// are zero), what a BF16 NPU computes. Without AVX512_BF16 an FMA emulation gives the
// same bits, several times slower. F32, F16 and Q8_0 weights, the norms and the
// panel-packed short rows (tiny models' LM head) are FP32 in both modes; attention
// uses BF16 pair products in the bf16 mode (attention.hpp).
enum class arithmetic : std::uint8_t { fp32, bf16 };
const char* to_string(arithmetic a);
// "fp32" or "bf16"; empty optional for anything else.
std::optional<arithmetic> parse_arithmetic(std::string_view s);

// Activations rounded to BF16 for the bf16 mode: vector v's n values at
// data[v * ld, v * ld + n), zero up to ld = n rounded up to 32.
struct bf16_vectors {
    std::int64_t n = 0, ld = 0;
    simd_vector<std::uint16_t> data;
};
void round_vectors_bf16(const float* x, std::int64_t nvec, std::int64_t ldx, std::int64_t n, bf16_vectors& out);
// The same with the vectors split across the pool (same bits; a prefill's rows no
// longer wait on one thread while the other idles). Small batches run inline.
void round_vectors_bf16(thread_pool& pool, const float* x, std::int64_t nvec, std::int64_t ldx, std::int64_t n,
                        bf16_vectors& out);
// Y[v * ldy + r - r0] = BF16 row r . vector v in the bf16 mode's arithmetic, v < nvec,
// w.type == bf16. Register-blocked (several rows x several vectors per micro-kernel);
// each output is one 16-lane chain over the columns in 32-element steps, then the
// lanes summed in one fixed tree: row-exact for any nvec and any row range.
void dot_rows_bf16_products(const tensor_view& w, std::int64_t r0, std::int64_t r1, const bf16_vectors& x,
                            std::int64_t nvec, float* y, std::int64_t ldy);
// Whether dot_rows_bf16_products runs `vdpbf16ps` (AVX512_BF16 present and allowed)
// or its FMA emulation; tests force the emulation to compare the two bit for bit.
bool bf16_products_native();
void allow_bf16_products_native(bool allowed);

// How `linear` may trade exactness for speed. `row_exact`: every row of Y equals
// what linear gives for that row alone (t = 1), bit for bit, for any t (decode
// batches). `fastest`: the same for t <= 16; larger t (prefill) uses sgemm.
enum class linear_mode : std::uint8_t { fastest, row_exact };

// Y[t x w.rows] = X[t x w.cols] * w^T, rows split across the pool. With
// `arith` = bf16 and BF16 weights, dot_rows_bf16_products (row-exact in every mode).
void linear(thread_pool& pool, const tensor_view& w, const float* x, std::int64_t t, std::int64_t ldx, float* y,
            std::int64_t ldy, linear_mode mode = linear_mode::fastest, arithmetic arith = arithmetic::fp32);

// Several matrices of one input (q, k, v; gate, up): output i is linear(outs[i].w, x)
// into outs[i].y with stride outs[i].ldy, the same bits as one linear call each. In
// the bf16 mode and for Q8_0 (same column count) the activations are rounded or
// quantised once and the rows of all the matrices are split across the pool in one
// pass (one synchronisation instead of one per matrix); the FP32 paths call linear
// once per matrix.
struct linear_output {
    tensor_view w;
    float* y = nullptr;
    std::int64_t ldy = 0;
};
void linear_fused(thread_pool& pool, std::span<const linear_output> outs, const float* x, std::int64_t t,
                  std::int64_t ldx, linear_mode mode = linear_mode::fastest, arithmetic arith = arithmetic::fp32);

// Short weight rows (cols <= k_panel_max_cols: the tiny models' LM head, 151,936 x 64)
// repacked for batches: rows in panels of 8, panel p = [col][8 rows], in FP32 or BF16
// (as stored; the conversion is exact). Each output is one FMA chain over the columns
// in order, so a row's value does not depend on how many vectors share the call
// (row-exact) and no horizontal sum is paid per (row, vector), which is what made
// dot_rows_multi slow on short rows: a B16 decode of a tiny model cost 30x B1.
constexpr std::int64_t k_panel_max_cols = 256;
struct panel_matrix {
    std::int64_t rows = 0, cols = 0;
    simd_vector<float> f32;
    simd_vector<std::uint16_t> bf16;
    bool empty() const { return f32.empty() && bf16.empty(); }
    // Empty when `w` has more than k_panel_max_cols columns or is Q8_0.
    static panel_matrix pack(const tensor_view& w);
};
// Y[v * ldy + r] for rows of panels [p0, p1), v < nvec.
void panel_rows_multi(const panel_matrix& w, std::int64_t p0, std::int64_t p1, const float* x, std::int64_t nvec,
                      std::int64_t ldx, float* y, std::int64_t ldy);
// Y[t x w.rows] = X[t x w.cols] * w^T over panels split across the pool; row-exact for any t.
void linear_panels(thread_pool& pool, const panel_matrix& w, const float* x, std::int64_t t, std::int64_t ldx,
                   float* y, std::int64_t ldy);

// Q8_0 (kernels_q8.cpp). Activations quantised per 32-block: int8 values and an
// FP32 scale per block, vector v's blocks at [v * blocks, (v + 1) * blocks), and per
// block -128 x (sum of its values) (`bsum`: the VNNI form's start, as its weights are
// offset to unsigned).
struct q8_vectors {
    std::int64_t blocks = 0;
    std::vector<std::int8_t> q;
    std::vector<float> d;
    std::vector<std::int32_t> bsum;
};
// n a multiple of 32.
void quantize_vectors_q8(const float* x, std::int64_t nvec, std::int64_t ldx, std::int64_t n, q8_vectors& out);
// The same with the vectors split across the pool (same bits).
void quantize_vectors_q8(thread_pool& pool, const float* x, std::int64_t nvec, std::int64_t ldx, std::int64_t n,
                         q8_vectors& out);
// Y[v * ldy + r - r0] = Q8_0 row r . vector v (int8 products, per-block scales), v < nvec:
// one FP32 chain per output, acc = fma(float(block's int32 sum), d_w x d_x, acc) over the
// blocks in order. Row-exact: a vector's result does not depend on nvec or the row range.
// With AVX512_VNNI, `vpdpbusd` micro-kernels over rows interleaved in panels of 16 (one
// register holds 16 rows' block sums) x several vectors; otherwise an AVX2 form giving
// the same bits.
void dot_rows_q8(const tensor_view& w, std::int64_t r0, std::int64_t r1, const q8_vectors& xq, std::int64_t nvec,
                 float* y, std::int64_t ldy);
// A whole Q8_0 matrix's rows interleaved once into the VNNI form's panels (a model's
// weights, at load): while the returned handle lives, dot_rows_q8 on any view inside w
// (w, a row or column slice, any row range) reads the panels, in both forms, instead of
// interleaving rows per call (the same bits either way). `own`: w's bytes, writable, when
// the caller owns them and reads them only through these kernels and row_to_f32 while
// the handle lives; the panels then take the
// rows' place, byte for byte, when their sizes agree (rows a multiple of 16, an even
// number of blocks, rows back to back), and the rows come back when the handle ends.
// Otherwise the panels are a copy. Null when there is nothing to pin (not Q8_0, a CPU
// without AVX512_VNNI, or already pinned); whether the VNNI form is allowed at the time
// does not matter, as both forms read pinned panels.
std::shared_ptr<const void> q8_panels_pin(const tensor_view& w, std::byte* own = nullptr);
// Row r of w as FP32 (convert_row_to_f32's values), read from the panels when w is
// pinned (an embedding table tied to a pinned LM head).
void row_to_f32(const tensor_view& w, std::int64_t r, float* out);
// Whether dot_rows_q8 runs its VNNI form (AVX512_VNNI present and allowed); tests force
// the AVX2 form to compare the two bit for bit, benchmarks time both.
bool q8_dot_vnni();
void allow_q8_dot_vnni(bool allowed);

float dot_f32(const float* a, const float* b, std::int64_t n);
// Sum of n floats with four independent accumulators (a pure read stream; the benchmarks' bandwidth probe).
float sum_f32(const float* a, std::int64_t n);
// y += a * x
void axpy_f32(float a, const float* x, float* y, std::int64_t n);
// out = x / sqrt(mean(x^2) + eps) * w (out may alias x).
void rmsnorm(const float* x, const float* w, std::int64_t n, float eps, float* out);
// Rotate-half RoPE on one head: pairs (i, i + d/2) rotated by angle pos * inv_freq[i].
void rope_rotate_half(float* v, const float* cos, const float* sin, std::int64_t head_dim);
// g = silu(g) * u
void silu_mul(float* g, const float* u, std::int64_t n);
// In-place softmax (max-subtracted, FP32).
void softmax(float* x, std::int64_t n);

}  // namespace calserve::model
