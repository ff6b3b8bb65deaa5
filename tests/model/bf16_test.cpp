// BF16 kernels: exact against references written here, AVX2 == scalar bit for bit.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "model/core/bf16.hpp"

using namespace calserve::model;

namespace {

std::vector<bf16> all_patterns() {
    std::vector<bf16> v(65536);
    for (std::uint32_t i = 0; i < 65536; ++i) v[i] = static_cast<bf16>(i);
    return v;
}

// Reference FP32 -> BF16 by distance in double: the two neighbours, nearer wins, ties to even.
bf16 reference_round(float f) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    if (std::isnan(f)) return static_cast<bf16>((u >> 16) | 0x40);
    const auto lower = static_cast<bf16>(u >> 16);
    if ((u & 0xffff) == 0) return lower;
    const auto upper = static_cast<bf16>(lower + 1);
    const double d_lo = std::fabs(static_cast<double>(f) - static_cast<double>(bf16_to_f32(lower)));
    const double hi = static_cast<double>(bf16_to_f32(upper));
    // The neighbour above the largest finite magnitude is infinity: compare against 2^128.
    const double hi_value = std::isinf(hi) ? std::copysign(std::ldexp(1.0, 128), hi) : hi;
    const double d_hi = std::fabs(static_cast<double>(f) - hi_value);
    if (d_lo < d_hi) return lower;
    if (d_hi < d_lo) return upper;
    return (lower & 1) == 0 ? lower : upper;
}

std::int32_t reference_argmax(const std::vector<float>& v) {
    std::int32_t best = 0;
    float best_v = -std::numeric_limits<float>::infinity();
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (v[i] > best_v) {  // NaN never compares greater
            best_v = v[i];
            best = static_cast<std::int32_t>(i);
        }
    }
    return best;
}

}  // namespace

TEST_CASE("bf16_to_f32 is exact for all 65536 patterns on both paths", "[bf16]") {
    const auto in = all_patterns();
    std::vector<float> scalar(in.size()), avx2(in.size());
    bf16_to_f32(in, scalar, simd_level::scalar);
    bf16_to_f32(in, avx2, simd_level::avx2);
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
        const std::uint32_t expected = static_cast<std::uint32_t>(i) << 16;
        const bool nan_pattern = (i & 0x7fff) > 0x7f80;
        mismatches += std::bit_cast<std::uint32_t>(scalar[i]) != expected || std::bit_cast<std::uint32_t>(avx2[i]) != expected ||
                      std::isnan(scalar[i]) != nan_pattern;
    }
    REQUIRE(mismatches == 0);
}

TEST_CASE("odd lengths and offsets convert the tail too", "[bf16]") {
    const auto all = all_patterns();
    for (std::size_t len : {0u, 1u, 7u, 15u, 16u, 17u, 33u, 1001u}) {
        for (std::size_t off : {0u, 1u, 3u}) {
            std::span<const bf16> in(all.data() + 0x3f00 + off, len);
            std::vector<float> a(len, -1.0f), b(len, -2.0f);
            bf16_to_f32(in, a, simd_level::scalar);
            bf16_to_f32(in, b, simd_level::avx2);
            REQUIRE((len == 0 || std::memcmp(a.data(), b.data(), len * sizeof(float)) == 0));
        }
    }
}

TEST_CASE("f32_to_bf16 rounds to nearest even, on both paths", "[bf16]") {
    std::vector<float> in;
    const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::max(),
                              -std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(),
                              std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                              std::bit_cast<float>(0x7f800001u), std::bit_cast<float>(0x3f808000u),
                              std::bit_cast<float>(0x3f818000u), std::bit_cast<float>(0x3f808001u),
                              std::bit_cast<float>(0x7f7f8000u), std::bit_cast<float>(0x7f7f7fffu)};
    in.assign(std::begin(specials), std::end(specials));
    std::mt19937 gen(1234);
    const std::size_t random_count = std::getenv("CALSERVE_SANITIZED") ? 100'000 : 1'000'000;
    for (std::size_t i = 0; i < random_count; ++i) in.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(gen())));
    for (std::uint32_t hi = 0; hi < 65536; hi += 97) {  // exact ties at every exponent
        in.push_back(std::bit_cast<float>((hi << 16) | 0x8000u));
    }
    std::vector<bf16> scalar(in.size()), avx2(in.size());
    f32_to_bf16(in, scalar, simd_level::scalar);
    f32_to_bf16(in, avx2, simd_level::avx2);
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
        const bf16 expected = reference_round(in[i]);
        const bool ok = scalar[i] == expected && avx2[i] == expected && f32_to_bf16(in[i]) == expected;
        if (!ok && mismatches++ < 5) {
            UNSCOPED_INFO("input bits " << std::bit_cast<std::uint32_t>(in[i]) << " expected " << expected << " scalar "
                                        << scalar[i] << " avx2 " << avx2[i]);
        }
    }
    REQUIRE(mismatches == 0);
}

TEST_CASE("BF16 -> FP32 -> BF16 is the identity, NaN stays NaN", "[bf16]") {
    std::size_t mismatches = 0;
    for (std::uint32_t i = 0; i < 65536; ++i) {
        const auto b = static_cast<bf16>(i);
        const bf16 back = f32_to_bf16(bf16_to_f32(b));
        mismatches += (i & 0x7fff) > 0x7f80 ? !std::isnan(bf16_to_f32(back)) : back != b;
    }
    REQUIRE(mismatches == 0);
}

TEST_CASE("fused BF16 argmax equals the scalar reference on both paths", "[bf16][argmax]") {
    std::mt19937 gen(99);
    const bf16 nan_pos = 0x7fc1, nan_neg = 0xffc1, neg_inf = 0xff80, pos_zero = 0x0000, neg_zero = 0x8000;
    for (int round = 0; round < 200; ++round) {
        const std::size_t n = 1 + gen() % 3000;
        std::vector<bf16> v(n);
        const int mode = round % 5;
        for (auto& x : v) {
            switch (mode) {
                case 0: x = static_cast<bf16>(gen()); break;  // any pattern, NaN included
                case 1: x = f32_to_bf16(static_cast<float>(gen() % 8) - 4.0f); break;  // many ties
                case 2: x = gen() % 5 == 0 ? nan_neg : neg_inf; break;  // nothing above -inf
                case 3: x = gen() % 2 ? pos_zero : neg_zero; break;  // ±0 are equal
                default: x = gen() % 50 == 0 ? nan_pos : f32_to_bf16(static_cast<float>(gen() % 1000) / 7.0f);
            }
        }
        std::vector<float> f(n);
        bf16_to_f32(v, f, simd_level::scalar);
        const std::int32_t expected = reference_argmax(f);
        INFO("round " << round << " n " << n);
        REQUIRE(argmax_bf16(v, simd_level::scalar) == expected);
        REQUIRE(argmax_bf16(v, simd_level::avx2) == expected);
        REQUIRE(argmax_f32(f, simd_level::scalar) == expected);
        REQUIRE(argmax_f32(f, simd_level::avx2) == expected);
    }
}

TEST_CASE("argmax ties go to the lowest index, across blocks", "[bf16][argmax]") {
    std::vector<bf16> v(151936, f32_to_bf16(-3.0f));
    v[100000] = f32_to_bf16(7.0f);
    v[5000] = f32_to_bf16(7.0f);
    v[151935] = f32_to_bf16(7.0f);
    std::vector<float> f(v.size());
    bf16_to_f32(v, f);
    for (auto level : {simd_level::scalar, simd_level::avx2}) {
        REQUIRE(argmax_bf16(v, level) == 5000);
        REQUIRE(argmax_f32(f, level) == 5000);
    }
    REQUIRE(argmax_bf16(std::span<const bf16>{}) == -1);
}
