// Scoring a prompt (docs/api.md "Scoring", docs/device.md "Scoring prefills"), on the
// deterministic runtime with the simulated NPU: a prompt token's score is the logprob it
// gets when generated. Generate N tokens greedily with logprobs, then score prompt +
// output: each output position's score equals the generated token's logprob bit for
// bit, and its alternatives equal top_logprobs' (ids and bits). Both come from the
// host sampler's arithmetic on the same BF16 logits (the prefill's rows are row-exact:
// each the bits decoding that token gives), so no tolerance is needed; a tolerance would
// hide a scoring prefill whose rows drifted from decode's. The same holds across prefill
// chunks, beside a prefix-cache entry for the same prompt (a scored prompt takes nothing
// from the cache: cached KV has no logits), with a decode batch running beside it, and on
// the cpu backend.
#include <bit>
#include <mutex>

#include <catch2/catch.hpp>

#include "actors/batch_tick_actor.hpp"
#include "actors/kv_manager_actor.hpp"
#include "tests/actors/engine_fixture.hpp"

using namespace calserve;
using namespace calserve::actors;
using calserve::test::engine_harness;
using calserve::test::recording_sink;

namespace {

struct step_sink : recording_sink {
    std::vector<generated_token> steps;
    void on_token(const generated_token& t) override {
        recording_sink::on_token(t);
        std::lock_guard lock(mutex);
        steps.push_back(t);
    }
};

std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }

constexpr std::int32_t k_top = 4;

// Greedy generation of `n` tokens with logprobs and k_top alternatives.
generation_request generating(engine_harness& h, std::string id, std::vector<token_id> prompt, std::int64_t n) {
    auto r = h.greedy(std::move(id), std::move(prompt), n);
    r.sampling.logprobs = true;
    r.sampling.top_logprobs = k_top;
    r.ignore_eos = true;
    return r;
}

// Scores `prompt` (one token generated, as max_tokens 0 asks of the engine).
generation_request scoring(engine_harness& h, std::string id, std::vector<token_id> prompt) {
    auto r = h.greedy(std::move(id), std::move(prompt), 1);
    r.score_top_n = k_top;
    r.ignore_eos = true;
    return r;
}

// The output's logprobs against the scores of prompt + output at the output's positions.
void check_scores_equal_generation(const std::vector<token_id>& prompt, const step_sink& gen, const step_sink& score) {
    REQUIRE(score.finishes == 1);
    const auto& scores = score.result.prompt_scores;
    REQUIRE(scores.size() == prompt.size() + gen.steps.size());
    CHECK(scores.front().top.empty());  // the first token has no score
    for (std::size_t k = 0; k < gen.steps.size(); ++k) {
        INFO("output token " << k);
        const auto& want = gen.steps[k];
        const auto& got = scores[prompt.size() + k];
        CHECK(bits_of(got.logprob) == bits_of(want.logprob));
        REQUIRE(got.top.size() == want.top.size());
        for (std::size_t j = 0; j < want.top.size(); ++j) {
            CHECK(got.top[j].token == want.top[j].token);
            CHECK(bits_of(got.top[j].logprob) == bits_of(want.top[j].logprob));
        }
    }
    for (std::size_t i = 1; i < prompt.size(); ++i) {  // every prompt token is scored
        CHECK(scores[i].logprob <= 0.0f);
        CHECK(scores[i].top.size() == std::size_t(k_top));
    }
}

// Generates, then scores prompt + output, on a fresh package engine with `cfg`.
void generate_then_score(const std::vector<std::string>& cfg, std::size_t prompt_len, std::int64_t n, bool warm_cache,
                         bool cpu = false) {
    auto made = cpu ? std::make_unique<engine_harness>(cfg) : std::make_unique<engine_harness>(calserve::test::on_package, cfg);
    engine_harness& h = *made;
    const auto prompt = calserve::test::random_prompt(6100 + int(prompt_len), int(prompt_len));
    auto gen = std::make_shared<step_sink>();
    REQUIRE(h.engine->submit(generating(h, "gen", prompt, n), gen).ok());
    h.run_until_done();
    REQUIRE(gen->finishes == 1);
    REQUIRE(std::int64_t(gen->steps.size()) == n);
    auto whole = prompt;
    for (const auto& s : gen->steps) whole.push_back(s.token);
    if (warm_cache) {  // the same prompt once more, unscored: its KV becomes a cache entry
        auto plain = std::make_shared<step_sink>();
        REQUIRE(h.engine->submit(h.greedy("plain", whole, 1), plain).ok());
        h.run_until_done();
    }
    auto score = std::make_shared<step_sink>();
    auto beside = std::make_shared<step_sink>();  // a decode running beside the scoring prefill
    REQUIRE(h.engine->submit(generating(h, "beside", calserve::test::random_prompt(77, 5), 12), beside).ok());
    REQUIRE(h.engine->submit(scoring(h, "score", whole), score).ok());
    h.run_until_done();
    check_scores_equal_generation(prompt, *gen, *score);
    CHECK(score->result.tokens.cached_tokens == 0);
    CHECK(beside->finishes == 1);
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
    CHECK(h.rt.failures().empty());
}

}  // namespace

TEST_CASE("a prompt token's score is the logprob it gets when generated greedily, bit for bit", "[engine][scoring]") {
    SECTION("host sampling") {
        generate_then_score({"log.level=warn", "device.sampling_head=false"}, 9, 12, false);
    }
    SECTION("the sampling head serves the generated logprobs from its top k") {
        generate_then_score({"log.level=warn"}, 9, 12, false);
    }
    SECTION("a long prompt prefilled in chunks") {
        generate_then_score({"log.level=warn", "runtime.prefill_chunk=16", "runtime.prefill_chunk_ms=0"}, 70, 10, false);
    }
    SECTION("beside a prefix cache entry of the same prompt, which it does not use") {
        generate_then_score({"log.level=warn"}, 20, 8, true);
    }
    SECTION("the cpu backend (a Hugging Face directory, bf16 arithmetic)") {
        generate_then_score({"log.level=warn", "device.cpu_arithmetic=bf16"}, 11, 8, false, true);
    }
}

TEST_CASE("a request without scoring gets no scores; a scored one ended early has none to give", "[engine][scoring]") {
    engine_harness h(calserve::test::on_package, {"log.level=warn"});
    auto plain = std::make_shared<step_sink>();
    REQUIRE(h.engine->submit(h.greedy("plain", calserve::test::random_prompt(5, 6), 3), plain).ok());
    h.run_until_done();
    REQUIRE(plain->finishes == 1);
    CHECK(plain->result.prompt_scores.empty());
    auto r = scoring(h, "too-many", calserve::test::random_prompt(6, 6));
    r.score_top_n = 21;
    CHECK(h.engine->submit(r, std::make_shared<step_sink>()).error().code == status::invalid_argument);
}
