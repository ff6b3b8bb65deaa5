// Routing counts (model/core/routing_counts.hpp) recorded by the CPU reference model
// on a tiny MoE: every layer's counts sum to tokens x top_k, the same on every run,
// nothing recorded when off, and the JSON file reads back to the same table.
#include <catch2/catch.hpp>

#include <numeric>

#include "tests/model/transformer_fixture.hpp"

using namespace calserve;

namespace {
model::routing_counts record(model::transformer& m, std::span<const model::token_id> prompt, int decodes) {
    const auto& c = m.config();
    auto counts = model::make_routing_counts(std::size_t(c.num_hidden_layers), std::size_t(c.num_experts),
                                             c.num_experts_per_tok);
    m.record_routing(&counts);
    std::vector<float> logits(std::size_t(c.vocab_size));
    REQUIRE(m.prefill(1, prompt, logits));
    for (int i = 0; i < decodes; ++i) REQUIRE(m.decode(1, prompt[std::size_t(i)], logits));
    m.record_routing(nullptr);
    m.free_sequence(1);
    return counts;
}
}  // namespace

TEST_CASE("routing counts: a tiny MoE records tokens x top_k per layer, deterministically", "[transformer][routing]") {
    const auto cfg = test::small_config(true);
    REQUIRE(cfg.num_experts > 1);
    auto dir = test::write_small_model("routing-moe", cfg);
    auto m = test::load_model(dir);
    const auto prompt = test::random_tokens(24, cfg.vocab_size);
    const auto a = record(*m, prompt, 5);
    REQUIRE(a.layers() == std::size_t(cfg.num_hidden_layers));
    for (std::size_t l = 0; l < a.layers(); ++l) {
        CHECK(a.tokens[l] == 24 + 5);
        CHECK(std::accumulate(a.experts[l].begin(), a.experts[l].end(), std::uint64_t{0}) ==
              (24 + 5) * std::uint64_t(cfg.num_experts_per_tok));
        // Each token picks top_k distinct experts: no expert exceeds the token count.
        for (auto n : a.experts[l]) CHECK(n <= a.tokens[l]);
    }
    const auto b = record(*m, prompt, 5);
    CHECK(a.experts == b.experts);
    // Tensor-parallel shards route each token once, like the unsplit model.
    auto tp = test::load_model(dir, 2);
    CHECK(record(*tp, prompt, 5).experts == a.experts);

    // Off: a forward pass leaves a table it no longer holds untouched.
    auto untouched = model::make_routing_counts(a.layers(), a.num_experts(), a.top_k);
    std::vector<float> logits(std::size_t(cfg.vocab_size));
    REQUIRE(m->prefill(2, prompt, logits));
    CHECK(untouched.tokens == std::vector<std::uint64_t>(a.layers(), 0));

    auto back = model::parse_routing_counts(model::to_json_text(a));
    REQUIRE(back);
    CHECK(back->experts == a.experts);
    CHECK(back->tokens == a.tokens);
    CHECK(back->top_k == a.top_k);
}

TEST_CASE("routing counts: malformed files are parse errors that say what is wrong", "[routing]") {
    const auto bad = [](std::string_view text) {
        auto r = model::parse_routing_counts(text);
        REQUIRE_FALSE(r);
        CHECK(r.code() == status::parse_error);
        return r.error().message;
    };
    CHECK_THAT(bad("[1,2]"), Catch::Contains("not a JSON object"));
    CHECK_THAT(bad(R"({"format":"other"})"), Catch::Contains("format"));
    CHECK_THAT(bad(R"({"format":"calserve-routing-counts","top_k":2,"tokens":[1,1],"counts":[[1,1],[1]]})"),
               Catch::Contains("counts[1] has 1 experts"));
    CHECK_THAT(bad(R"({"format":"calserve-routing-counts","top_k":2,"tokens":[1],"counts":[[1,1],[1,1]]})"),
               Catch::Contains("\"tokens\" has 1 layers"));
    CHECK_THAT(bad(R"({"format":"calserve-routing-counts","top_k":2,"tokens":[1],"counts":[[1,-1]]})"),
               Catch::Contains("non-negative"));
}
