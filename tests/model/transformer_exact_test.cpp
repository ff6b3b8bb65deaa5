// Prefill and decode split anywhere give a row the same bits: prefill of N tokens,
// prefill of k then decode of the rest, and prefill in chunks all produce the
// logits of one token-at-a-time decoding exactly (memcmp), across KV page
// boundaries (64 positions), for dense and MoE, F32 and BF16, TP1 and TP2, in both
// arithmetic modes (fp32, and bf16 with its vdpbf16ps kernels and their emulation), and
// with the S8 V-cache (per-position scales) as with BF16 V, and for Q8_0 GGUF weights
// (int8 kernels, VNNI and AVX2 forms).
// This is what lets a preempted sequence be re-prefilled without changing its stream.
#include <catch2/catch.hpp>

#include <cstring>

#include "model/weights/gguf_model.hpp"
#include "tests/model/transformer_fixture.hpp"

using namespace calserve;

namespace {

constexpr std::size_t k_tokens = 200;

bool same_bits(const float* a, const float* b, std::size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

struct exact_case {
    bool moe = false;
    std::string dtype;
    int tp = 1;
    model::arithmetic arith = model::arithmetic::fp32;
    model::v_cache_dtype v_cache = model::v_cache_dtype::bf16;
};

// Logits of every position computed one token at a time (prefill 1, then decode).
std::vector<float> decoded_logits(model::transformer& m, model::seq_id seq, const std::vector<model::token_id>& toks) {
    const auto v = static_cast<std::size_t>(m.shape().vocab_size);
    std::vector<float> out(toks.size() * v);
    REQUIRE(m.prefill(seq, std::span(toks.data(), 1), std::span(out.data(), v)).ok());
    for (std::size_t i = 1; i < toks.size(); ++i) REQUIRE(m.decode(seq, toks[i], std::span(out.data() + i * v, v)).ok());
    return out;
}

// `gguf` non-empty: the model converted to a GGUF of that dtype ("q8_0") first.
void check_splits(const exact_case& c, const std::string& gguf = "") {
    INFO("moe " << c.moe << " dtype " << c.dtype << " gguf " << gguf << " tp " << c.tp << " arithmetic " << model::to_string(c.arith)
                << " V cache " << model::to_string(c.v_cache));
    std::string tag = "exact-" + std::string(c.moe ? "moe-" : "dense-") + c.dtype;
    if (!gguf.empty()) tag.append("-gguf-").append(gguf);
    auto dir = test::write_small_model(tag, test::small_config(c.moe), c.dtype);
    if (!gguf.empty()) {
        const auto file = dir / ("model-" + gguf + ".gguf");
        auto r = model::write_gguf_from_hf(dir, file, gguf);
        REQUIRE(r.ok());
        dir = file;
    }
    auto m = test::load_model(dir, c.tp, 2, c.arith, c.v_cache);
    const auto v = static_cast<std::size_t>(m->shape().vocab_size);
    const auto toks = test::random_tokens(k_tokens, m->shape().vocab_size, 17);
    const auto inc = decoded_logits(*m, 1, toks);
    std::vector<float> last(v);
    model::seq_id id = 10;
    // Prefill of n tokens: its last row equals the decoded one.
    for (std::size_t n : {1u, 2u, 7u, 63u, 64u, 65u, 128u, 131u, 200u}) {
        INFO("prefill " << n);
        REQUIRE(m->prefill(++id, std::span(toks.data(), n), last).ok());
        CHECK(same_bits(last.data(), inc.data() + (n - 1) * v, v));
    }
    // Prefill of k, then decode of the rest: every step equals the decoded one.
    for (std::size_t k : {1u, 5u, 63u, 64u, 65u, 100u}) {
        INFO("prefill " << k << " then decode");
        REQUIRE(m->prefill(++id, std::span(toks.data(), k), last).ok());
        for (std::size_t i = k; i < k_tokens; ++i) {
            REQUIRE(m->decode(id, toks[i], last).ok());
            INFO("position " << i);
            CHECK(same_bits(last.data(), inc.data() + i * v, v));
        }
    }
    // Prefill in chunks that start anywhere inside a page.
    for (std::vector<std::size_t> chunks : {std::vector<std::size_t>{3, 61, 1, 70, 65}, {64, 64, 72}, {130, 70}}) {
        ++id;
        std::size_t at = 0;
        for (std::size_t n : chunks) {
            REQUIRE(m->prefill(id, std::span(toks.data() + at, n), last).ok());
            at += n;
            INFO("chunk ending at " << at);
            CHECK(same_bits(last.data(), inc.data() + (at - 1) * v, v));
        }
    }
}

}  // namespace

TEST_CASE("dense: prefill, resumed prefill and decode give every row the same bits", "[transformer][exact]") {
    check_splits({false, "f32", 1});
    check_splits({false, "bf16", 1});
}

TEST_CASE("moe: prefill, resumed prefill and decode give every row the same bits", "[transformer][exact]") {
    check_splits({true, "f32", 1});
}

TEST_CASE("tensor parallel 2: prefill, resumed prefill and decode give every row the same bits",
          "[transformer][exact]") {
    check_splits({false, "bf16", 2});
    check_splits({true, "bf16", 2});
}

TEST_CASE("bf16 arithmetic: prefill, resumed prefill and decode give every row the same bits",
          "[transformer][exact][bf16]") {
    check_splits({false, "bf16", 1, model::arithmetic::bf16});
    check_splits({true, "bf16", 1, model::arithmetic::bf16});
    check_splits({false, "bf16", 2, model::arithmetic::bf16});
    check_splits({false, "f32", 1, model::arithmetic::bf16});  // F32 weights: FP32 products in this mode too
}

TEST_CASE("S8 V-cache: prefill, resumed prefill and decode give every row the same bits",
          "[transformer][exact][s8v]") {
    const auto s8 = model::v_cache_dtype::s8;
    check_splits({false, "f32", 1, model::arithmetic::fp32, s8});
    check_splits({false, "bf16", 1, model::arithmetic::fp32, s8});
    check_splits({true, "bf16", 1, model::arithmetic::fp32, s8});
    check_splits({false, "bf16", 2, model::arithmetic::fp32, s8});
    check_splits({true, "bf16", 2, model::arithmetic::bf16, s8});
}

TEST_CASE("Q8_0: prefill, resumed prefill and decode give every row the same bits", "[transformer][exact][q8]") {
    const auto fp32 = model::arithmetic::fp32, bf16 = model::arithmetic::bf16;
    const auto v = model::v_cache_dtype::bf16;
    check_splits({false, "f32", 1, fp32, v}, "q8_0");
    check_splits({true, "f32", 1, bf16, v}, "q8_0");
    check_splits({false, "f32", 2, bf16, v}, "q8_0");
    if (!model::q8_dot_vnni()) return;
    model::allow_q8_dot_vnni(false);  // the AVX2 form too
    check_splits({false, "f32", 1, bf16, v}, "q8_0");
    model::allow_q8_dot_vnni(true);
}

TEST_CASE("S8 V-cache differs from BF16 V and stays close to it", "[transformer][s8v]") {
    auto dir = test::write_small_model("exact-modes-s8v", test::small_config(false), "bf16");
    auto bf16 = test::load_model(dir, 1, 2);
    auto s8 = test::load_model(dir, 1, 2, model::arithmetic::fp32, model::v_cache_dtype::s8);
    CHECK(s8->v_cache() == model::v_cache_dtype::s8);
    const auto v = static_cast<std::size_t>(bf16->shape().vocab_size);
    const auto toks = test::random_tokens(150, bf16->shape().vocab_size, 8);
    std::vector<float> a(toks.size() * v), b(toks.size() * v);
    REQUIRE(bf16->prefill_all(1, toks, a).ok());
    REQUIRE(s8->prefill_all(1, toks, b).ok());
    CHECK_FALSE(same_bits(a.data(), b.data(), a.size()));  // the mode is really in use
    float scale = 0.0f;
    for (float x : a) scale = std::max(scale, std::abs(x));
    CHECK(test::max_abs_diff(a.data(), b.data(), a.size()) < 0.05f * scale);
}

TEST_CASE("bf16 arithmetic: the vdpbf16ps kernels and their emulation give a model the same bits",
          "[transformer][exact][bf16]") {
    if (!model::bf16_products_native()) {
        WARN("no AVX512_BF16 on this CPU: only the emulation runs");
        return;
    }
    auto dir = test::write_small_model("exact-emulated-bf16", test::small_config(false), "bf16");
    auto m = test::load_model(dir, 1, 2, model::arithmetic::bf16);
    const auto v = static_cast<std::size_t>(m->shape().vocab_size);
    const auto toks = test::random_tokens(130, m->shape().vocab_size, 5);
    std::vector<float> native(toks.size() * v), emulated(toks.size() * v);
    REQUIRE(m->prefill_all(1, toks, native).ok());
    model::allow_bf16_products_native(false);
    const bool ok = m->prefill_all(2, toks, emulated).ok();
    model::allow_bf16_products_native(true);
    REQUIRE(ok);
    CHECK(same_bits(native.data(), emulated.data(), native.size()));
}

TEST_CASE("bf16 arithmetic differs from fp32 and stays close to it", "[transformer][bf16]") {
    auto dir = test::write_small_model("exact-modes-bf16", test::small_config(false), "bf16");
    auto fp32 = test::load_model(dir, 1, 2, model::arithmetic::fp32);
    auto bf16 = test::load_model(dir, 1, 2, model::arithmetic::bf16);
    CHECK(bf16->arithmetic_mode() == model::arithmetic::bf16);
    const auto v = static_cast<std::size_t>(fp32->shape().vocab_size);
    const auto toks = test::random_tokens(64, fp32->shape().vocab_size, 8);
    std::vector<float> a(toks.size() * v), b(toks.size() * v);
    REQUIRE(fp32->prefill_all(1, toks, a).ok());
    REQUIRE(bf16->prefill_all(1, toks, b).ok());
    CHECK_FALSE(same_bits(a.data(), b.data(), a.size()));  // the mode is really in use
    float scale = 0.0f;
    for (float x : a) scale = std::max(scale, std::abs(x));
    CHECK(test::max_abs_diff(a.data(), b.data(), a.size()) < 0.05f * scale);
}
