// The attention kernel (model/cpu/attention.*): a row's output is the same bits
// whether it runs alone, in a block with other rows of its sequence, split across
// calls anywhere, or in the AVX2 instead of the AVX-512 form; and it is the
// softmax-weighted sum of the values within FP32 rounding of a float64 evaluation
// over the keys and values as stored (BF16; values in S8 with a per-position scale
// in the S8 V-cache mode, whose rule this file recomputes independently). In the
// bf16 arithmetic mode the same holds for every form (vdpbf16ps and its AVX-512F and
// AVX2 emulations), and the answer is the float64 one within BF16 rounding.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "model/core/bf16.hpp"
#include "model/cpu/attention.hpp"
#include "model/cpu/kernels.hpp"

using namespace calserve;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A cache of `positions` random keys and values for `kv_heads` heads, queries for
// every position and `group` query heads per KV head, and the float64 answer.
struct fixture {
    std::int64_t kv_heads, group, head_dim, positions;
    model::v_cache_dtype v_dtype;
    model::arithmetic arith = model::arithmetic::fp32;
    model::kv_cache kv;
    std::vector<float> q, keys, values;  // [pos][kv_head][d] for keys and values as stored
    model::thread_pool pool{2};

    fixture(std::int64_t kvh, std::int64_t g, std::int64_t hd, std::int64_t n, unsigned seed,
            model::v_cache_dtype v = model::v_cache_dtype::bf16)
        : kv_heads(kvh), group(g), head_dim(hd), positions(n), v_dtype(v) {
        std::mt19937 gen(seed);
        std::normal_distribution<float> d(0.0f, 1.0f);
        q.resize(static_cast<std::size_t>(n * qd()));
        for (auto& x : q) x = 2.0f * d(gen);
        keys.resize(static_cast<std::size_t>(n * kvh * hd));
        values.resize(keys.size());
        for (auto& x : keys) x = d(gen);
        for (auto& x : values) x = d(gen);
        kv.reserve(1, kvh, hd, n, v);
        for (std::int64_t p = 0; p < n; ++p)
            for (std::int64_t h = 0; h < kvh; ++h) {
                const auto at = static_cast<std::size_t>((p * kvh + h) * hd);
                kv.store(0, p, h, keys.data() + at, values.data() + at);
            }
    }
    std::int64_t qd() const { return kv_heads * group * head_dim; }

    // Outputs of positions [p0, p1) computed in one call.
    std::vector<float> run(std::int64_t p0, std::int64_t p1) {
        std::vector<model::attention_row> rows;
        for (std::int64_t p = p0; p < p1; ++p) rows.push_back({&kv, p});
        std::vector<float> out(static_cast<std::size_t>((p1 - p0) * qd()));
        model::attention_args a;
        a.kv_begin = 0, a.kv_end = kv_heads, a.group = group;
        a.q = q.data() + p0 * qd(), a.ldq = qd(), a.out = out.data(), a.ldo = qd();
        a.arith = arith;
        model::attend_causal(pool, a, rows);
        return out;
    }

    // Every position, in calls of the given sizes (the rest in one last call).
    std::vector<float> run_split(const std::vector<std::int64_t>& sizes) {
        std::vector<float> all;
        std::int64_t at = 0;
        for (std::size_t i = 0; at < positions; ++i) {
            const std::int64_t n = i < sizes.size() ? std::min(sizes[i], positions - at) : positions - at;
            auto part = run(at, at + n);
            all.insert(all.end(), part.begin(), part.end());
            at += n;
        }
        return all;
    }

    // Largest |out - float64 reference| over every position and head.
    double max_error(const std::vector<float>& out) const {
        double worst = 0;
        for (std::int64_t p = 0; p < positions; ++p)
            for (std::int64_t h = 0; h < kv_heads * group; ++h) {
                const std::int64_t kh = h / group;
                std::vector<double> s(static_cast<std::size_t>(p + 1));
                double m = -1e300, l = 0;
                for (std::int64_t j = 0; j <= p; ++j) {
                    double dot = 0;
                    for (std::int64_t d = 0; d < head_dim; ++d)
                        dot += double(q[static_cast<std::size_t>(p * qd() + h * head_dim + d)]) *
                               stored(keys, j, kh, d);
                    s[static_cast<std::size_t>(j)] = dot / std::sqrt(double(head_dim));
                    m = std::max(m, s[static_cast<std::size_t>(j)]);
                }
                for (auto& x : s) l += (x = std::exp(x - m));
                for (std::int64_t d = 0; d < head_dim; ++d) {
                    double o = 0;
                    for (std::int64_t j = 0; j <= p; ++j) o += s[static_cast<std::size_t>(j)] * stored_value(j, kh, d);
                    const double got = out[static_cast<std::size_t>(p * qd() + h * head_dim + d)];
                    worst = std::max(worst, std::abs(got - o / l));
                }
            }
        return worst;
    }

    // An element as the cache holds it (BF16).
    double stored(const std::vector<float>& x, std::int64_t pos, std::int64_t kh, std::int64_t d) const {
        return model::bf16_to_f32(model::f32_to_bf16(x[static_cast<std::size_t>((pos * kv_heads + kh) * head_dim + d)]));
    }
    // A value as the cache holds it: BF16, or S8 times the position's scale (max|v| / 127).
    double stored_value(std::int64_t pos, std::int64_t kh, std::int64_t d) const {
        if (v_dtype == model::v_cache_dtype::bf16) return stored(values, pos, kh, d);
        const float* v = values.data() + (pos * kv_heads + kh) * head_dim;
        float top = 0.0f;
        for (std::int64_t i = 0; i < head_dim; ++i) top = std::max(top, std::abs(v[i]));
        const float q = std::nearbyint(v[d] * (127.0f / top));
        return double(q) * double(top / 127.0f);
    }
};

}  // namespace

TEST_CASE("attention: a row's bits do not depend on the rows sharing its call", "[attention][exact]") {
    struct shape {
        std::int64_t kv_heads, group, head_dim;
    };
    // head_dim 8 and 40: padded value rows; groups 1..8 and 3, 5 (pair chunks of 8, 4, 2, 1).
    for (const shape sh : {shape{2, 2, 32}, shape{1, 8, 128}, shape{2, 1, 8}, shape{1, 3, 40}, shape{1, 5, 16}}) {
        INFO("kv_heads " << sh.kv_heads << " group " << sh.group << " head_dim " << sh.head_dim);
        fixture f(sh.kv_heads, sh.group, sh.head_dim, 150, 7);
        const auto together = f.run(0, f.positions);
        CHECK(f.max_error(together) < 2e-5);
        CHECK(same_bits(f.run_split({}), together));
        std::vector<std::int64_t> ones(static_cast<std::size_t>(f.positions), 1);
        CHECK(same_bits(f.run_split(ones), together));  // every row alone: decode
        CHECK(same_bits(f.run_split({1, 62, 3, 64, 5}), together));
        CHECK(same_bits(f.run_split({63, 2, 70}), together));
    }
}

TEST_CASE("attention: the AVX-512 form gives the AVX2 form's bits", "[attention][exact]") {
    if (!model::avx512_available()) {
        WARN("no AVX-512 on this CPU: both forms are the AVX2 one");
        return;
    }
    for (std::int64_t hd : {8, 32, 40, 128}) {
        INFO("head_dim " << hd);
        fixture f(2, 2, hd, 140, 9);
        REQUIRE(model::attention_avx512());
        const auto fast = f.run(0, f.positions);
        const auto fast_alone = f.run(f.positions - 1, f.positions);
        model::allow_attention_avx512(false);
        const auto plain = f.run(0, f.positions);
        const auto plain_alone = f.run(f.positions - 1, f.positions);
        model::allow_attention_avx512(true);
        CHECK(same_bits(fast, plain));
        CHECK(same_bits(fast_alone, plain_alone));
    }
}

TEST_CASE("attention: large scores keep the softmax finite and exact across splits", "[attention][exact]") {
    fixture f(1, 2, 64, 130, 3);
    for (auto& x : f.q) x *= 40.0f;  // scores in the hundreds: one key takes nearly all the weight
    const auto together = f.run(0, f.positions);
    for (float x : together) REQUIRE(std::isfinite(x));
    CHECK(f.max_error(together) < 1e-4);
    std::vector<std::int64_t> ones(static_cast<std::size_t>(f.positions), 1);
    CHECK(same_bits(f.run_split(ones), together));
}

TEST_CASE("attention, S8 V-cache: exact across splits and forms, and the dequantised values' answer",
          "[attention][exact][s8v]") {
    const auto s8 = model::v_cache_dtype::s8;
    for (std::int64_t hd : {8, 40, 128}) {
        INFO("head_dim " << hd);
        fixture f(2, 3, hd, 150, 13, s8);
        const auto together = f.run(0, f.positions);
        CHECK(f.max_error(together) < 2e-5);
        std::vector<std::int64_t> ones(static_cast<std::size_t>(f.positions), 1);
        CHECK(same_bits(f.run_split(ones), together));
        CHECK(same_bits(f.run_split({1, 62, 3, 64, 5}), together));
        if (!model::avx512_available()) continue;
        model::allow_attention_avx512(false);
        const auto plain = f.run(0, f.positions);
        model::allow_attention_avx512(true);
        CHECK(same_bits(plain, together));
    }
}

TEST_CASE("S8 V-cache: storage, scales, copy and truncate", "[attention][s8v]") {
    fixture f(2, 1, 40, 100, 21, model::v_cache_dtype::s8);
    CHECK(f.kv.v_dtype() == model::v_cache_dtype::s8);
    // Bytes per page: keys 2 x 40 x 64 BF16, values 2 x 64 x 48 int8, scales 2 x 64 FP32; two pages.
    CHECK(f.kv.bytes() == 2 * (2 * 40 * 64 * 2 + 2 * 64 * 48 + 2 * 64 * 4));
    // Each value within half a step of its original; the step is max|v| / 127.
    for (std::int64_t p = 0; p < f.positions; ++p)
        for (std::int64_t h = 0; h < 2; ++h) {
            const float* s = f.kv.value_scales(0, p / 64, h);
            REQUIRE(s != nullptr);
            for (std::int64_t d = 0; d < 40; ++d) {
                const double orig = f.values[static_cast<std::size_t>((p * 2 + h) * 40 + d)];
                CHECK(std::abs(f.stored_value(p, h, d) - orig) <= 0.5 * s[p % 64] * (1 + 1e-6));
            }
        }
    // A copy of the first 70 positions: the copied page is identical up to 70, zero past it.
    model::kv_cache copy;
    copy.copy_prefix(f.kv, 70);
    for (std::int64_t h = 0; h < 2; ++h) {
        const auto* a = reinterpret_cast<const std::int8_t*>(copy.values(0, 1, h));
        const auto* b = reinterpret_cast<const std::int8_t*>(f.kv.values(0, 1, h));
        CHECK(std::memcmp(a, b, 6 * 48) == 0);
        CHECK(std::all_of(a + 6 * 48, a + 64 * 48, [](std::int8_t x) { return x == 0; }));
        CHECK(copy.value_scales(0, 1, h)[5] == f.kv.value_scales(0, 1, h)[5]);
        CHECK(copy.value_scales(0, 1, h)[6] == 0.0f);
    }
    // A BF16 cache has no scales.
    fixture g(1, 1, 8, 10, 3);
    CHECK(g.kv.value_scales(0, 0, 0) == nullptr);
}

namespace {

// Every position's outputs in the bf16 mode by the three forms: native vdpbf16ps (when
// the CPU has it), the AVX-512F emulation and the AVX2 emulation.
struct forms {
    std::vector<float> native, avx512, avx2;
};
forms run_forms(fixture& f) {
    forms r;
    r.native = f.run(0, f.positions);
    model::allow_bf16_products_native(false);
    r.avx512 = f.run(0, f.positions);
    model::allow_attention_avx512(false);
    r.avx2 = f.run(0, f.positions);
    model::allow_attention_avx512(true);
    model::allow_bf16_products_native(true);
    return r;
}

}  // namespace

TEST_CASE("attention, bf16 mode: a row's bits do not depend on the rows sharing its call", "[attention][exact][bf16]") {
    struct shape {
        std::int64_t kv_heads, group, head_dim;
    };
    for (const shape sh : {shape{2, 2, 32}, shape{1, 8, 128}, shape{2, 1, 8}, shape{1, 3, 40}, shape{1, 5, 16}}) {
        INFO("kv_heads " << sh.kv_heads << " group " << sh.group << " head_dim " << sh.head_dim);
        fixture f(sh.kv_heads, sh.group, sh.head_dim, 150, 7);
        f.arith = model::arithmetic::bf16;
        const auto together = f.run(0, f.positions);
        // Queries and probabilities rounded to BF16 (8 significant bits): about 1% of an output.
        CHECK(f.max_error(together) < 3e-2);
        CHECK(same_bits(f.run_split({}), together));
        std::vector<std::int64_t> ones(static_cast<std::size_t>(f.positions), 1);
        CHECK(same_bits(f.run_split(ones), together));  // every row alone: decode
        CHECK(same_bits(f.run_split({1, 62, 3, 64, 5}), together));
        CHECK(same_bits(f.run_split({63, 2, 70}), together));
        f.arith = model::arithmetic::fp32;
        CHECK_FALSE(same_bits(f.run(0, f.positions), together));  // the modes really differ
    }
}

TEST_CASE("attention, bf16 mode: vdpbf16ps and its emulations give the same bits", "[attention][exact][bf16]") {
    if (!model::bf16_products_native()) WARN("no AVX512_BF16 on this CPU: the native form is an emulation");
    for (std::int64_t hd : {8, 40, 128}) {
        for (auto v : {model::v_cache_dtype::bf16, model::v_cache_dtype::s8}) {
            INFO("head_dim " << hd << " v " << model::to_string(v));
            fixture f(2, 2, hd, 140, 9, v);
            f.arith = model::arithmetic::bf16;
            const forms r = run_forms(f);
            CHECK(same_bits(r.native, r.avx512));
            CHECK(same_bits(r.native, r.avx2));
        }
    }
    // Tiny values: products and sums past the FP32 normal range are flushed alike.
    fixture f(1, 2, 32, 130, 5);
    f.arith = model::arithmetic::bf16;
    for (auto& x : f.values) x *= 1e-36f;
    for (std::int64_t p = 0; p < f.positions; ++p)
        f.kv.store(0, p, 0, f.keys.data() + p * 32, f.values.data() + p * 32);
    const forms r = run_forms(f);
    CHECK(same_bits(r.native, r.avx512));
    CHECK(same_bits(r.native, r.avx2));
}

TEST_CASE("attention, bf16 mode with the S8 V-cache: exact across splits", "[attention][exact][bf16][s8v]") {
    fixture f(2, 3, 40, 150, 13, model::v_cache_dtype::s8);
    f.arith = model::arithmetic::bf16;
    const auto together = f.run(0, f.positions);
    CHECK(f.max_error(together) < 3e-2);
    std::vector<std::int64_t> ones(static_cast<std::size_t>(f.positions), 1);
    CHECK(same_bits(f.run_split(ones), together));
    CHECK(same_bits(f.run_split({1, 62, 3, 64, 5}), together));
}

TEST_CASE("BF16 cache: copy and truncate keep a row's answer", "[attention][kv]") {
    for (auto arith : {model::arithmetic::fp32, model::arithmetic::bf16}) {
        INFO("arithmetic " << model::to_string(arith));
        fixture f(2, 2, 40, 130, 17);
        f.arith = arith;
        const auto whole = f.run(0, f.positions);
        // The first 70 positions copied, then the rest stored again: the answers of the original.
        fixture g(2, 2, 40, 130, 17);
        g.arith = arith;
        g.kv.truncate(70);
        model::kv_cache copy;
        copy.copy_prefix(g.kv, 70);
        copy.reserve(1, 2, 40, 130);
        for (std::int64_t p = 70; p < g.positions; ++p)
            for (std::int64_t h = 0; h < 2; ++h) {
                const auto at = static_cast<std::size_t>((p * 2 + h) * 40);
                copy.store(0, p, h, g.keys.data() + at, g.values.data() + at);
            }
        std::swap(g.kv, copy);
        CHECK(same_bits(g.run(0, g.positions), whole));
        // A truncated page answers rows before the cut as the full one does.
        fixture t(2, 2, 40, 130, 17);
        t.arith = arith;
        t.kv.truncate(70);
        const auto before = t.run(0, 70);
        CHECK(same_bits(before, std::vector<float>(whole.begin(), whole.begin() + 70 * t.qd())));
    }
}
