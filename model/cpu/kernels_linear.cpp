// The row-parallel linear layer: matvec, small-batch and sgemm paths; see kernels.hpp.
#include <cblas.h>

#include <algorithm>
#include <mutex>
#include <span>
#include <vector>

#include "model/cpu/kernels.hpp"

namespace calserve::model {
namespace {

// Up to here the row-exact kernel (each weight row read from memory once for all
// vectors) is also the fast one; beyond it, prefill switches to sgemm.
constexpr std::int64_t k_small_batch = 16;
constexpr std::int64_t k_gemm_tile_rows = 64;  // converted FP32 tile: 64 x cols, stays in L2

// Our pool already splits rows across threads; OpenBLAS must not add its own.
void single_threaded_blas() {
    static std::once_flag once;
    std::call_once(once, [] { openblas_set_num_threads(1); });
}

void gemm_rows(const tensor_view& w, std::int64_t r0, std::int64_t r1, const float* x, std::int64_t t,
               std::int64_t ldx, float* y, std::int64_t ldy) {
    thread_local std::vector<float> tile;
    for (std::int64_t r = r0; r < r1; r += k_gemm_tile_rows) {
        const std::int64_t rows = std::min(k_gemm_tile_rows, r1 - r);
        const float* b = nullptr;
        std::int64_t ldb = w.cols;
        if (w.type == dtype::f32) {
            b = reinterpret_cast<const float*>(w.row(r));
            ldb = w.row_stride;
        } else {
            tile.resize(static_cast<std::size_t>(rows * w.cols));
            convert_rows_to_f32(w, r, r + rows, tile.data());
            b = tile.data();
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(t), static_cast<int>(rows),
                    static_cast<int>(w.cols), 1.0f, x, static_cast<int>(ldx), b, static_cast<int>(ldb), 0.0f, y + r,
                    static_cast<int>(ldy));
    }
}

// The pieces of the concatenated rows [b, e) of `outs`: fn(output, first row, last row).
template <class Fn>
void for_pieces(std::span<const linear_output> outs, std::int64_t b, std::int64_t e, Fn&& fn) {
    std::int64_t base = 0;
    for (const linear_output& o : outs) {
        const std::int64_t lo = std::max(b, base), hi = std::min(e, base + o.w.rows);
        if (lo < hi) fn(o, lo - base, hi - base);
        base += o.w.rows;
    }
}

}  // namespace

void linear_fused(thread_pool& pool, std::span<const linear_output> outs, const float* x, std::int64_t t,
                  std::int64_t ldx, linear_mode mode, arithmetic arith) {
    if (outs.empty() || t <= 0) return;
    const tensor_view& w0 = outs.front().w;
    bool same = true;
    std::int64_t rows = 0;
    for (const linear_output& o : outs) {
        same = same && o.w.type == w0.type && o.w.cols == w0.cols;
        rows += o.w.rows;
    }
    const bool fused = same && (w0.type == dtype::q8_0 || (arith == arithmetic::bf16 && w0.type == dtype::bf16));
    if (!fused) {  // the FP32 paths: one call each (their sgemm tiles need whole matrices)
        for (const linear_output& o : outs) linear(pool, o.w, x, t, ldx, o.y, o.ldy, mode, arith);
        return;
    }
    const std::int64_t work = rows * w0.cols * t;
    if (w0.type == dtype::q8_0) {
        thread_local q8_vectors caller_xq;
        q8_vectors& xq = caller_xq;
        quantize_vectors_q8(pool, x, t, ldx, w0.cols, xq);
        pool.parallel_for(rows, 16, work, [&](std::int64_t b, std::int64_t e) {
            for_pieces(outs, b, e, [&](const linear_output& o, std::int64_t r0, std::int64_t r1) {
                dot_rows_q8(o.w, r0, r1, xq, t, o.y + r0, o.ldy);
            });
        });
        return;
    }
    thread_local bf16_vectors caller_xb;
    bf16_vectors& xb = caller_xb;
    round_vectors_bf16(pool, x, t, ldx, w0.cols, xb);
    pool.parallel_for(rows, 16, work, [&](std::int64_t b, std::int64_t e) {
        for_pieces(outs, b, e, [&](const linear_output& o, std::int64_t r0, std::int64_t r1) {
            dot_rows_bf16_products(o.w, r0, r1, xb, t, o.y + r0, o.ldy);
        });
    });
}

void linear(thread_pool& pool, const tensor_view& w, const float* x, std::int64_t t, std::int64_t ldx, float* y,
            std::int64_t ldy, linear_mode mode, arithmetic arith) {
    if (t <= 0 || w.rows <= 0) return;
    const std::int64_t work = w.rows * w.cols * t;
    if (w.type == dtype::q8_0) {
        // Activations quantised once per call (rows split across the pool); every mode is the int8 kernel.
        // (A named reference: a lambda body naming a thread_local would read the worker's own.)
        thread_local q8_vectors caller_xq;
        q8_vectors& xq = caller_xq;
        quantize_vectors_q8(pool, x, t, ldx, w.cols, xq);
        pool.parallel_for(w.rows, 16, work,
                          [&](std::int64_t b, std::int64_t e) { dot_rows_q8(w, b, e, xq, t, y + b, ldy); });
        return;
    }
    if (arith == arithmetic::bf16 && w.type == dtype::bf16) {
        thread_local bf16_vectors caller_xb;  // rounded once per call, as Q8_0's
        bf16_vectors& xb = caller_xb;
        round_vectors_bf16(pool, x, t, ldx, w.cols, xb);
        pool.parallel_for(w.rows, 16, work,
                          [&](std::int64_t b, std::int64_t e) { dot_rows_bf16_products(w, b, e, xb, t, y + b, ldy); });
        return;
    }
    if (t == 1) {
        pool.parallel_for(w.rows, 16, work, [&](std::int64_t b, std::int64_t e) { dot_rows(w, b, e, x, y + b); });
        return;
    }
    if (t <= k_small_batch || mode == linear_mode::row_exact) {
        pool.parallel_for(w.rows, 16, work,
                          [&](std::int64_t b, std::int64_t e) { dot_rows_multi(w, b, e, x, t, ldx, y + b, ldy); });
        return;
    }
    single_threaded_blas();
    pool.parallel_for(w.rows, k_gemm_tile_rows, work,
                      [&](std::int64_t b, std::int64_t e) { gemm_rows(w, b, e, x, t, ldx, y, ldy); });
}

}  // namespace calserve::model
