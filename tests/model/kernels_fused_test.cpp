// linear_fused (kernels_linear.cpp): several matrices of one input in one pass over the
// pool give every output the bits of one linear call per matrix, in both arithmetic
// modes, for BF16 and Q8_0 weights, at decode and prefill batch sizes, with output
// strides wider than the matrices (the q/k/v and gate/up layouts of the transformer).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "model/core/bf16.hpp"
#include "model/cpu/kernels.hpp"
#include "model/weights/gguf_model.hpp"

using namespace calserve;

namespace {

struct matrix {
    std::vector<std::uint16_t> bf16;
    std::vector<std::byte> q8;
    model::tensor_view view;
    matrix(model::dtype type, std::int64_t rows, std::int64_t cols, unsigned seed) {
        std::mt19937 gen(seed);
        std::uniform_real_distribution<float> d(-1.0f, 1.0f);
        std::vector<float> f(static_cast<std::size_t>(rows * cols));
        for (auto& v : f) v = d(gen);
        const std::byte* data = nullptr;
        if (type == model::dtype::bf16) {
            for (float v : f) bf16.push_back(model::f32_to_bf16(v));
            data = reinterpret_cast<const std::byte*>(bf16.data());
        } else {
            q8.resize(static_cast<std::size_t>(rows * cols / 32 * 34));
            model::quantize_q8_0(f.data(), rows * cols, q8.data());
            data = q8.data();
        }
        view = {type, rows, cols, cols, data};
    }
};

// Three matrices (48, 16 and 35 rows: block boundaries fall inside and between them)
// written side by side into rows of width 48 + 16 + 35 + 5, fused and one by one.
void check_fused(model::dtype type, model::arithmetic arith) {
    const std::int64_t cols = 256, ld = 48 + 16 + 35 + 5;
    const matrix a(type, 48, cols, 1), b(type, 16, cols, 2), c(type, 35, cols, 3);
    model::thread_pool pool(2);
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> d(-2.0f, 2.0f);
    for (std::int64_t t : {1, 3, 8, 17, 40}) {
        std::vector<float> x(static_cast<std::size_t>(t * cols));
        for (auto& v : x) v = d(gen);
        std::vector<float> fused(static_cast<std::size_t>(t * ld), -1.0f), alone(fused);
        const model::linear_output outs[] = {{a.view, fused.data(), ld},
                                             {b.view, fused.data() + 48, ld},
                                             {c.view, fused.data() + 64, ld}};
        for (auto mode : {model::linear_mode::row_exact, model::linear_mode::fastest}) {
            model::linear_fused(pool, outs, x.data(), t, cols, mode, arith);
            model::linear(pool, a.view, x.data(), t, cols, alone.data(), ld, mode, arith);
            model::linear(pool, b.view, x.data(), t, cols, alone.data() + 48, ld, mode, arith);
            model::linear(pool, c.view, x.data(), t, cols, alone.data() + 64, ld, mode, arith);
            INFO("t " << t << " mode " << static_cast<int>(mode));
            CHECK(std::memcmp(fused.data(), alone.data(), fused.size() * sizeof(float)) == 0);
        }
    }
}

}  // namespace

TEST_CASE("linear_fused gives one linear call per matrix's bits: BF16 weights, bf16 mode", "[kernels][fused]") {
    check_fused(model::dtype::bf16, model::arithmetic::bf16);
}

TEST_CASE("linear_fused gives one linear call per matrix's bits: BF16 weights, fp32 mode", "[kernels][fused]") {
    check_fused(model::dtype::bf16, model::arithmetic::fp32);
}

TEST_CASE("linear_fused gives one linear call per matrix's bits: Q8_0 weights, both forms", "[kernels][fused]") {
    for (bool vnni : {true, false}) {
        model::allow_q8_dot_vnni(vnni);
        check_fused(model::dtype::q8_0, model::arithmetic::bf16);
        check_fused(model::dtype::q8_0, model::arithmetic::fp32);
    }
    model::allow_q8_dot_vnni(true);
}

// A prefill's activations are rounded (bf16 mode) or quantised (Q8_0) with the vectors
// split across the pool: the same bytes as one thread, for every vector (zeros,
// subnormals and a ragged width among them).
TEST_CASE("rounding and quantising activations across the pool give one thread's bytes", "[kernels][fused]") {
    const std::int64_t nvec = 300, n = 1024, ldx = n + 8;
    std::mt19937 gen(11);
    std::uniform_real_distribution<float> d(-3.0f, 3.0f);
    std::vector<float> x(static_cast<std::size_t>(nvec * ldx));
    for (auto& v : x) v = d(gen);
    for (std::int64_t k = 0; k < n; ++k) x[static_cast<std::size_t>(5 * ldx + k)] = 0.0f;
    for (std::int64_t k = 0; k < n; k += 3) x[static_cast<std::size_t>(7 * ldx + k)] = 1e-40f;
    model::thread_pool pool(2);
    model::bf16_vectors one, split;
    model::round_vectors_bf16(x.data(), nvec, ldx, n, one);
    model::round_vectors_bf16(pool, x.data(), nvec, ldx, n, split);
    CHECK(one.ld == split.ld);
    CHECK(one.data == split.data);
    model::round_vectors_bf16(pool, x.data(), nvec, ldx, n - 40, split);  // width not a multiple of 32
    model::round_vectors_bf16(x.data(), nvec, ldx, n - 40, one);
    CHECK(one.data == split.data);
    model::q8_vectors q_one, q_split;
    model::quantize_vectors_q8(x.data(), nvec, ldx, n, q_one);
    model::quantize_vectors_q8(pool, x.data(), nvec, ldx, n, q_split);
    CHECK(q_one.q == q_split.q);
    CHECK(q_one.d == q_split.d);
    CHECK(q_one.bsum == q_split.bsum);
}
