// Incremental decode == full prefill, TP2 == TP1, batched == single decode, input errors.
#include <catch2/catch.hpp>

#include <cmath>

#include "tests/model/transformer_fixture.hpp"

using namespace calserve;
using calserve::test::max_abs_diff;

namespace {

// Two paths that sum in different FP32 orders (prefill_all's sgemm against the
// row-exact decode kernels; TP2's partial sums against TP1) may round a cached key
// or value to the neighbouring BF16 (one step is 2^-8 of it), which moves these
// models' logits by up to ~1e-3. Paths with one order are compared bit for bit
// (transformer_exact_test, transformer_batch_test).
constexpr float k_reordered_tol = 3e-3f;

// Logits of every position computed one token at a time (prefill 1, then decode).
std::vector<float> incremental_logits(model::transformer& m, model::seq_id seq, const std::vector<model::token_id>& toks) {
    const auto v = static_cast<std::size_t>(m.shape().vocab_size);
    std::vector<float> out(toks.size() * v);
    REQUIRE(m.prefill(seq, std::span(toks.data(), 1), std::span(out.data(), v)).ok());
    for (std::size_t i = 1; i < toks.size(); ++i)
        REQUIRE(m.decode(seq, toks[i], std::span(out.data() + i * v, v)).ok());
    CHECK(m.sequence_length(seq) == static_cast<std::int64_t>(toks.size()));
    return out;
}

void check_decode_equals_prefill(bool moe) {
    auto dir = test::write_small_model(moe ? "dec-moe" : "dec-dense", test::small_config(moe));
    auto m = test::load_model(dir);
    const auto v = static_cast<std::size_t>(m->shape().vocab_size);
    const auto toks = test::random_tokens(257, m->shape().vocab_size);
    const auto inc = incremental_logits(*m, 1, toks);
    for (std::size_t len : {1u, 2u, 15u, 16u, 17u, 127u, 128u, 129u, 255u, 256u, 257u}) {
        INFO("prompt length " << len);
        std::vector<float> all(len * v);
        REQUIRE(m->prefill_all(100 + len, std::span(toks.data(), len), all).ok());
        float worst = 0.0f;
        for (std::size_t p = 0; p < len; ++p)
            worst = std::max(worst, max_abs_diff(all.data() + p * v, inc.data() + p * v, v));
        CHECK(worst <= k_reordered_tol);
        std::vector<float> last(v);
        REQUIRE(m->prefill(200 + len, std::span(toks.data(), len), last).ok());
        CHECK(max_abs_diff(last.data(), all.data() + (len - 1) * v, v) <= k_reordered_tol);
    }
    // Prefill in two chunks continues the same sequence.
    std::vector<float> last(v);
    REQUIRE(m->prefill(7, std::span(toks.data(), 100), last).ok());
    REQUIRE(m->prefill(7, std::span(toks.data() + 100, 157), last).ok());
    CHECK(max_abs_diff(last.data(), inc.data() + 256 * v, v) <= 1e-4f);
    CHECK(m->sequence_length(7) == 257);
}

}  // namespace

TEST_CASE("dense: incremental decode equals full prefill at every position") { check_decode_equals_prefill(false); }

TEST_CASE("moe: incremental decode equals full prefill at every position") { check_decode_equals_prefill(true); }

TEST_CASE("tensor parallel 2 equals the unsplit model") {
    for (bool moe : {false, true}) {
        INFO("moe " << moe);
        auto dir = test::write_small_model("tp2", test::small_config(moe, /*tied=*/moe));
        auto one = test::load_model(dir, 1);
        auto two = test::load_model(dir, 2);
        CHECK(two->tensor_parallel() == 2);
        const auto v = static_cast<std::size_t>(one->shape().vocab_size);
        const auto toks = test::random_tokens(40, one->shape().vocab_size, 11);
        std::vector<float> a(40 * v), b(40 * v);
        REQUIRE(one->prefill_all(1, toks, a).ok());
        REQUIRE(two->prefill_all(1, toks, b).ok());
        CHECK(max_abs_diff(a.data(), b.data(), a.size()) <= k_reordered_tol);
        for (model::token_id t : {5, 77, 300}) {
            REQUIRE(one->decode(1, t, std::span(a.data(), v)).ok());
            REQUIRE(two->decode(1, t, std::span(b.data(), v)).ok());
            CHECK(max_abs_diff(a.data(), b.data(), v) <= k_reordered_tol);
        }
    }
}

TEST_CASE("decode_batch equals decoding each sequence alone") {
    for (bool moe : {false, true}) {
        auto dir = test::write_small_model("batch", test::small_config(moe));
        auto m = test::load_model(dir);
        const auto v = static_cast<std::size_t>(m->shape().vocab_size);
        std::vector<float> scratch(v);
        const std::vector<model::seq_id> ids{3, 9, 4};
        for (std::size_t i = 0; i < ids.size(); ++i) {
            auto p = test::random_tokens(5 + 7 * i, m->shape().vocab_size, static_cast<unsigned>(i));
            REQUIRE(m->prefill(ids[i], p, scratch).ok());
            REQUIRE(m->prefill(ids[i] + 100, p, scratch).ok());
        }
        const std::vector<model::token_id> next{1, 2, 383};
        std::vector<float> batched(ids.size() * v), single(v);
        REQUIRE(m->decode_batch(ids, next, batched).ok());
        for (std::size_t i = 0; i < ids.size(); ++i) {
            REQUIRE(m->decode(ids[i] + 100, next[i], single).ok());
            CHECK(max_abs_diff(single.data(), batched.data() + i * v, v) <= 1e-4f);
            CHECK(m->sequence_length(ids[i]) == m->sequence_length(ids[i] + 100));
        }
    }
}

TEST_CASE("bad inputs are errors and leave sequences unchanged") {
    auto c = test::small_config(false);
    c.max_position_embeddings = 32;
    auto m = test::load_model(test::write_small_model("errors", c));
    std::vector<float> logits(static_cast<std::size_t>(c.vocab_size) * 2);
    const auto v = static_cast<std::size_t>(c.vocab_size);
    CHECK(m->decode(42, 1, std::span(logits.data(), v)).code() == status::unknown_sequence);
    const std::vector<model::token_id> ok{1, 2, 3};
    REQUIRE(m->prefill(1, ok, logits).ok());
    const std::vector<model::token_id> bad{1, static_cast<model::token_id>(c.vocab_size)};
    CHECK(m->prefill(1, bad, logits).code() == status::invalid_argument);
    CHECK(m->decode(1, -1, std::span(logits.data(), v)).code() == status::invalid_argument);
    CHECK(m->prefill(1, {}, logits).code() == status::invalid_argument);
    CHECK(m->sequence_length(1) == 3);
    const auto long_prompt = test::random_tokens(30, c.vocab_size);
    CHECK(m->prefill(1, long_prompt, logits).code() == status::context_overflow);
    CHECK(m->sequence_length(1) == 3);
    const std::vector<model::seq_id> twice{1, 1};
    const std::vector<model::token_id> toks{4, 5};
    CHECK(m->decode_batch(twice, toks, logits).code() == status::invalid_argument);
    CHECK(m->prefill(1, ok, std::span(logits.data(), 10)).code() == status::invalid_argument);
    m->free_sequence(1);
    CHECK(m->sequence_length(1) == 0);
    CHECK(m->decode(1, 1, std::span(logits.data(), v)).code() == status::unknown_sequence);
}
