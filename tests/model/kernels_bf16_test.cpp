// The bf16 arithmetic mode's dot products (kernels_bf16.cpp): the `vdpbf16ps`
// micro-kernels and their FMA emulation give the bits of a scalar statement of the
// instruction written here (odd pair, then even pair, each an exact product added with
// one rounding; subnormal inputs and results are zero), for every column tail, and a
// row's result never depends on how many vectors or rows share the call.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "model/core/bf16.hpp"
#include "model/cpu/kernels.hpp"

using namespace calserve;

namespace {

bool same_bits(const float* a, const float* b, std::size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

float flush(float f) { return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f; }

// The instruction, one output at a time, from its definition.
float reference_dot(const std::uint16_t* w, const std::uint16_t* x, std::int64_t n) {
    float lane[16] = {};
    for (std::int64_t k = 0; k < n; k += 32)
        for (int i = 0; i < 16; ++i) {
            auto at = [&](const std::uint16_t* p, std::int64_t j) {
                return flush(j < n ? model::bf16_to_f32(p[j]) : 0.0f);
            };
            const std::int64_t odd = k + 2 * i + 1, even = k + 2 * i;
            lane[i] = flush(std::fmaf(at(w, odd), at(x, odd), lane[i]));
            lane[i] = flush(std::fmaf(at(w, even), at(x, even), lane[i]));
        }
    float s[8];
    for (int i = 0; i < 8; ++i) s[i] = lane[i] + lane[i + 8];
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

// Values of every kind the kernels may meet: ordinary, tiny (subnormal products and
// sums), huge, subnormal BF16 and zeros of both signs.
std::uint16_t random_bf16(std::mt19937& gen, bool extremes) {
    std::uniform_real_distribution<float> d(-2.0f, 2.0f);
    if (!extremes) return model::f32_to_bf16(d(gen));
    switch (gen() % 8) {
        case 0: return static_cast<std::uint16_t>(gen() & 0x807f);                       // subnormal or zero
        case 1: return static_cast<std::uint16_t>((gen() & 0x807f) | ((1 + gen() % 4) << 7));  // near 2^-126
        case 2: return model::f32_to_bf16(std::ldexp(d(gen), 50));  // products near 2^100
        default: return model::f32_to_bf16(d(gen));
    }
}

struct bf16_matrix {
    std::vector<std::uint16_t> data;
    model::tensor_view view;
    bf16_matrix(std::int64_t rows, std::int64_t cols, unsigned seed, bool extremes = false) {
        std::mt19937 gen(seed);
        data.resize(static_cast<std::size_t>(rows * cols));
        for (auto& v : data) v = random_bf16(gen, extremes);
        view = {model::dtype::bf16, rows, cols, cols, reinterpret_cast<const std::byte*>(data.data())};
    }
};

model::bf16_vectors random_vectors(std::int64_t nvec, std::int64_t n, unsigned seed, bool extremes = false) {
    std::mt19937 gen(seed);
    std::vector<float> x(static_cast<std::size_t>(nvec * n));
    for (auto& v : x) {
        v = model::bf16_to_f32(random_bf16(gen, extremes));
        if (extremes && gen() % 4 == 0) v = std::bit_cast<float>(static_cast<std::uint32_t>(gen() & 0x807fffff));
    }
    model::bf16_vectors out;
    model::round_vectors_bf16(x.data(), nvec, n, n, out);
    return out;
}

std::vector<float> run(const bf16_matrix& w, std::int64_t r0, std::int64_t r1, const model::bf16_vectors& x,
                       std::int64_t v0, std::int64_t nvec, bool native) {
    model::bf16_vectors part;
    part.n = x.n, part.ld = x.ld;
    part.data.assign(x.data.begin() + v0 * x.ld, x.data.begin() + (v0 + nvec) * x.ld);
    std::vector<float> y(static_cast<std::size_t>(nvec * (r1 - r0)));
    model::allow_bf16_products_native(native);
    model::dot_rows_bf16_products(w.view, r0, r1, part, nvec, y.data(), r1 - r0);
    model::allow_bf16_products_native(true);
    return y;
}

void check_against_reference(std::int64_t rows, std::int64_t cols, std::int64_t nvec, bool extremes, bool native) {
    INFO("cols " << cols << " nvec " << nvec << " extremes " << extremes << " native " << native);
    bf16_matrix w(rows, cols, static_cast<unsigned>(cols + rows), extremes);
    const auto x = random_vectors(nvec, cols, static_cast<unsigned>(nvec * 31 + cols), extremes);
    const auto y = run(w, 0, rows, x, 0, nvec, native);
    std::int64_t wrong = 0;
    for (std::int64_t v = 0; v < nvec; ++v)
        for (std::int64_t r = 0; r < rows; ++r) {
            const float want = reference_dot(w.data.data() + r * cols, x.data.data() + v * x.ld, cols);
            if (std::bit_cast<std::uint32_t>(want) != std::bit_cast<std::uint32_t>(y[static_cast<std::size_t>(v * rows + r)]))
                ++wrong;
        }
    CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("round_vectors_bf16 rounds to nearest even, zeroes subnormals and pads with zeros", "[kernels][bf16]") {
    const std::vector<float> x{1.0f + 0x1p-8f, 1.0f + 0x1.8p-7f, -3.5f, 0x1p-130f, -0x1p-140f, 0.0f, -0.0f, 1e38f};
    model::bf16_vectors out;
    model::round_vectors_bf16(x.data(), 1, 8, 8, out);
    REQUIRE(out.ld == 32);
    CHECK(out.data[0] == 0x3f80);  // tie to even: down
    CHECK(out.data[1] == 0x3f82);  // tie to even: up
    CHECK(out.data[2] == model::f32_to_bf16(-3.5f));
    CHECK(out.data[3] == 0x0000);
    CHECK(out.data[4] == 0x8000);  // the sign survives the flush
    CHECK(out.data[5] == 0x0000);
    CHECK(out.data[6] == 0x8000);
    CHECK(out.data[7] == model::f32_to_bf16(1e38f));
    for (std::size_t i = 8; i < 32; ++i) CHECK(out.data[i] == 0);
}

TEST_CASE("bf16 products: the vdpbf16ps kernels and the emulation give the instruction's bits", "[kernels][bf16]") {
    const bool native = model::bf16_products_native();
    if (!native) WARN("no AVX512_BF16 on this CPU: only the emulation is checked");
    for (bool extremes : {false, true})
        for (std::int64_t cols : {1, 2, 31, 32, 33, 64, 100, 1027}) {  // every tail shape, odd lengths
            check_against_reference(29, cols, 7, extremes, false);
            if (native) check_against_reference(29, cols, 7, extremes, true);
        }
    if (native) check_against_reference(50, 3072, 13, false, true);
}

TEST_CASE("bf16 products: a row's result does not depend on the vectors or rows sharing the call",
          "[kernels][bf16]") {
    for (std::int64_t cols : {64, 1027}) {
        bf16_matrix w(61, cols, 3);  // 61 rows: every row block leaves a remainder
        const std::int64_t total = 40;
        const auto x = random_vectors(total, cols, 9);
        const auto all = run(w, 0, 61, x, 0, total, true);
        for (std::int64_t nvec : {1, 2, 3, 4, 5, 6, 7, 8, 13, 17}) {
            for (std::int64_t v0 : {std::int64_t{0}, total - nvec}) {
                for (auto [r0, r1] : {std::pair<std::int64_t, std::int64_t>{0, 61}, {5, 6}, {7, 40}}) {
                    INFO("cols " << cols << " nvec " << nvec << " v0 " << v0 << " rows " << r0 << ".." << r1);
                    const auto part = run(w, r0, r1, x, v0, nvec, true);
                    for (std::int64_t v = 0; v < nvec; ++v)
                        CHECK(same_bits(part.data() + v * (r1 - r0), all.data() + (v0 + v) * 61 + r0,
                                        static_cast<std::size_t>(r1 - r0)));
                }
            }
        }
    }
}

TEST_CASE("linear in the bf16 mode: every row equals itself alone, in both linear modes", "[kernels][bf16]") {
    model::thread_pool pool(2);
    bf16_matrix w(300, 512, 9);
    std::mt19937 gen(4);
    std::uniform_real_distribution<float> d(-2.0f, 2.0f);
    for (std::int64_t t : {1, 2, 7, 16, 17, 40, 300}) {
        std::vector<float> x(static_cast<std::size_t>(t * 512));
        for (auto& v : x) v = d(gen);
        std::vector<float> y(static_cast<std::size_t>(t * 300)), one(300);
        for (auto mode : {model::linear_mode::row_exact, model::linear_mode::fastest}) {
            model::linear(pool, w.view, x.data(), t, 512, y.data(), 300, mode, model::arithmetic::bf16);
            for (std::int64_t i = 0; i < t; ++i) {
                model::linear(pool, w.view, x.data() + i * 512, 1, 512, one.data(), 300, model::linear_mode::row_exact,
                              model::arithmetic::bf16);
                INFO("t " << t << " row " << i);
                CHECK(same_bits(y.data() + i * 300, one.data(), 300));
            }
        }
    }
}

TEST_CASE("parse_arithmetic names the two modes and nothing else", "[kernels][bf16]") {
    CHECK(model::parse_arithmetic("fp32") == model::arithmetic::fp32);
    CHECK(model::parse_arithmetic("bf16") == model::arithmetic::bf16);
    CHECK_FALSE(model::parse_arithmetic("BF16").has_value());
    CHECK_FALSE(model::parse_arithmetic("").has_value());
    CHECK(std::string(model::to_string(model::arithmetic::bf16)) == "bf16");
}
