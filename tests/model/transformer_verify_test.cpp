// decode_runs (the verify step of speculative decoding): every position of every run has
// the logits of decoding its tokens one at a time, bit for bit, in one forward pass; a
// truncate after it leaves the sequence as if only the kept tokens had been decoded.
#include <catch2/catch.hpp>

#include <cstring>

#include "tests/model/transformer_fixture.hpp"

using namespace calserve;

namespace {

bool same_bits(const float* a, const float* b, std::size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

void check_runs(bool moe, int tp, model::arithmetic arith) {
    INFO("moe " << moe << " tp " << tp << " arithmetic " << model::to_string(arith));
    auto dir = test::write_small_model(std::string("verify-exact-") + (moe ? "moe" : "dense"), test::small_config(moe), "bf16");
    auto m = test::load_model(dir, tp, 2, arith);
    const auto v = static_cast<std::size_t>(m->shape().vocab_size);
    const std::vector<model::seq_id> ids{1, 2, 3};
    const std::vector<std::int64_t> counts{5, 1, 3};  // a verify of 4 drafts, a plain row, 2 drafts
    std::vector<float> scratch(v);
    for (std::size_t i = 0; i < ids.size(); ++i) {
        const auto prompt = test::random_tokens(3 + 7 * i, m->shape().vocab_size, static_cast<unsigned>(10 + i));
        REQUIRE(m->prefill(ids[i], prompt, scratch).ok());
        REQUIRE(m->prefill(ids[i] + 100, prompt, scratch).ok());
    }
    const auto toks = test::random_tokens(9, m->shape().vocab_size, 77);
    std::vector<float> runs(9 * v), alone(v);
    REQUIRE(m->decode_runs(ids, counts, toks, runs).ok());
    std::size_t at = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
        for (std::int64_t j = 0; j < counts[i]; ++j, ++at) {
            REQUIRE(m->decode(ids[i] + 100, toks[at], alone).ok());
            INFO("run " << i << " position " << j);
            CHECK(same_bits(runs.data() + at * v, alone.data(), v));
        }
        CHECK(m->sequence_length(ids[i]) == m->sequence_length(ids[i] + 100));
    }
    // Rejected positions dropped: keep 2 of run 0's 5, then decode on; equals the twin kept the same way.
    const auto len0 = m->sequence_length(ids[0]);
    REQUIRE(m->truncate(ids[0], len0 - 3).ok());
    REQUIRE(m->truncate(ids[0] + 100, len0 - 3).ok());
    std::vector<float> a(v), b(v);
    REQUIRE(m->decode(ids[0], 17, a).ok());
    REQUIRE(m->decode(ids[0] + 100, 17, b).ok());
    CHECK(same_bits(a.data(), b.data(), v));
}

}  // namespace

TEST_CASE("decode_runs: every position equals the decode steps it stands for", "[transformer][verify]") {
    check_runs(false, 1, model::arithmetic::fp32);
    check_runs(true, 2, model::arithmetic::fp32);
    check_runs(false, 1, model::arithmetic::bf16);
}

TEST_CASE("decode_runs: bad input changes nothing", "[transformer][verify]") {
    auto dir = test::write_small_model("verify-bad", test::small_config(false));
    auto m = test::load_model(dir);
    const auto v = static_cast<std::size_t>(m->shape().vocab_size);
    std::vector<float> scratch(v), out(4 * v);
    REQUIRE(m->prefill(1, test::random_tokens(4, m->shape().vocab_size), scratch).ok());
    const std::vector<model::seq_id> one{1}, twice{1, 1}, unknown{9};
    const std::vector<std::int64_t> four{4}, zero{0}, two_two{2, 2};
    const std::vector<model::token_id> toks{1, 2, 3, 4}, bad{1, 2, 3, 100000};
    CHECK_FALSE(m->decode_runs(unknown, four, toks, out).ok());
    CHECK_FALSE(m->decode_runs(twice, two_two, toks, out).ok());
    CHECK_FALSE(m->decode_runs(one, zero, {}, out).ok());
    CHECK_FALSE(m->decode_runs(one, four, bad, out).ok());
    CHECK(m->sequence_length(1) == 4);
    REQUIRE(m->decode_runs(one, four, toks, out).ok());
    CHECK(m->sequence_length(1) == 8);
}
