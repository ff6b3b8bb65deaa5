// Seq copy and seq keep on the CPU transformer (what the prefix cache stands on): a
// sequence that starts as a copy of another's first n positions, or that was
// truncated to n, and then prefills the rest gives the same bits as one full
// prefill of the same tokens. Property test over random prompts, split points
// (inside and across 64-position pages) and models (dense/MoE, F32/BF16, TP1/TP2), with
// BF16 V and with the S8 V-cache.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "tests/model/transformer_fixture.hpp"

using namespace calserve;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void check_reuse(bool moe, const std::string& dtype, int tp, std::uint32_t seed,
                 model::v_cache_dtype v_cache = model::v_cache_dtype::bf16) {
    INFO("moe " << moe << " dtype " << dtype << " tp " << tp << " seed " << seed << " V cache "
                << model::to_string(v_cache));
    auto dir = test::write_small_model("reuse-" + std::string(moe ? "moe-" : "dense-") + dtype, test::small_config(moe),
                                       dtype);
    auto m = test::load_model(dir, tp, 2, model::arithmetic::fp32, v_cache);
    const auto v = static_cast<std::size_t>(m->shape().vocab_size);
    std::mt19937 rng(seed);
    model::seq_id id = 100;
    for (int trial = 0; trial < 6; ++trial) {
        const auto length = std::size_t(std::uniform_int_distribution<int>(2, 190)(rng));
        const auto toks = test::random_tokens(length, m->shape().vocab_size, rng());
        const auto split = std::size_t(std::uniform_int_distribution<int>(1, int(length) - 1)(rng));
        INFO("length " << length << " split " << split);
        std::vector<float> full(v), reused(v), kept(v);
        const auto whole = ++id;
        REQUIRE(m->prefill(whole, toks, full).ok());
        // A source holding the prefix and then something else entirely.
        const auto source = ++id;
        auto other = test::random_tokens(40, m->shape().vocab_size, rng());
        std::vector<model::token_id> source_tokens(toks.begin(), toks.begin() + std::ptrdiff_t(split));
        source_tokens.insert(source_tokens.end(), other.begin(), other.end());
        REQUIRE(m->prefill(source, source_tokens, reused).ok());
        // Seq copy of the shared prefix, then the rest.
        const auto copy = ++id;
        REQUIRE(m->copy_prefix(source, copy, std::int64_t(split)).ok());
        CHECK(m->sequence_length(copy) == std::int64_t(split));
        REQUIRE(m->prefill(copy, std::span(toks).subspan(split), reused).ok());
        CHECK(same_bits(reused, full));
        // Seq keep: the source truncated to the prefix, then the rest.
        REQUIRE(m->truncate(source, std::int64_t(split)).ok());
        CHECK(m->sequence_length(source) == std::int64_t(split));
        REQUIRE(m->prefill(source, std::span(toks).subspan(split), kept).ok());
        CHECK(same_bits(kept, full));
    }
}

}  // namespace

TEST_CASE("seq copy and seq keep then prefill give the bits of one full prefill", "[transformer][exact][kv]") {
    check_reuse(false, "bf16", 1, 1);
    check_reuse(false, "f32", 1, 2);
    check_reuse(true, "bf16", 1, 3);
    check_reuse(false, "bf16", 2, 4);
}

TEST_CASE("S8 V-cache: seq copy and seq keep then prefill give the bits of one full prefill",
          "[transformer][exact][kv][s8v]") {
    const auto s8 = model::v_cache_dtype::s8;
    check_reuse(false, "bf16", 1, 5, s8);
    check_reuse(true, "f32", 1, 6, s8);
    check_reuse(false, "bf16", 2, 7, s8);
}

TEST_CASE("seq copy and seq keep refuse what they cannot do", "[transformer][kv]") {
    auto dir = test::write_small_model("reuse-dense-bf16", test::small_config(false), "bf16");
    auto m = test::load_model(dir, 1);
    std::vector<float> logits(static_cast<std::size_t>(m->shape().vocab_size));
    const auto toks = test::random_tokens(10, m->shape().vocab_size, 5);
    REQUIRE(m->prefill(1, toks, logits).ok());
    CHECK(m->copy_prefix(1, 2, 11).code() == status::invalid_argument);  // past the source
    CHECK(m->copy_prefix(9, 2, 1).code() == status::invalid_argument);   // unknown source
    CHECK(m->copy_prefix(1, 1, 5).code() == status::invalid_argument);   // onto itself
    REQUIRE(m->copy_prefix(1, 2, 10).ok());
    CHECK(m->copy_prefix(1, 2, 3).code() == status::invalid_argument);   // destination not empty
    CHECK(m->truncate(1, 11).code() == status::invalid_argument);
    REQUIRE(m->truncate(1, 0).ok());
    CHECK(m->sequence_length(1) == 0);
}
