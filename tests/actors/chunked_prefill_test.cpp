// Chunked prefill on the deterministic runtime, in fixed chunks of runtime.prefill_chunk
// tokens (runtime.prefill_chunk_ms=0: the tiny package's prefills are priced well
// within the default target, so they would never be chunked): a long prompt prefilled in chunks gives exactly the tokens of one whole prefill, and
// a stream already decoding keeps receiving tokens between the chunks instead of
// waiting for the whole prompt.
#include <catch2/catch.hpp>

#include <atomic>

#include "actors/kv_manager_actor.hpp"
#include "tests/actors/engine_fixture.hpp"

using namespace calserve;
using namespace calserve::actors;
using calserve::test::engine_harness;

namespace {

// Records the global order in which tokens of all streams arrived.
struct ordered_sink : generation_sink {
    explicit ordered_sink(std::shared_ptr<std::atomic<int>> clock) : clock(std::move(clock)) {}
    void on_token(const generated_token& t) override {
        tokens.push_back(t.token);
        at.push_back((*clock)++);
    }
    void on_finish(const generation_result& r) override {
        ++finishes;
        result = r;
    }
    std::shared_ptr<std::atomic<int>> clock;
    std::vector<token_id> tokens;
    std::vector<int> at;
    int finishes = 0;
    generation_result result;
};

struct race {
    std::vector<token_id> long_tokens;
    int streamed_before_first = 0;  // the short stream's tokens that arrived before the long prompt's first
};

race run_race(int chunk) {
    engine_harness h({"runtime.prefill_chunk=" + std::to_string(chunk), "runtime.prefill_chunk_ms=0", "runtime.max_inflight=1",
                      "runtime.prefix_cache=false"});
    auto clock = std::make_shared<std::atomic<int>>(0);
    auto streaming = std::make_shared<ordered_sink>(clock);
    auto longer = std::make_shared<ordered_sink>(clock);
    REQUIRE(h.engine->submit(h.greedy("short", calserve::test::random_prompt(3, 4), 40), streaming).ok());
    REQUIRE(h.engine->submit(h.greedy("long", calserve::test::random_prompt(4, 300), 6), longer).ok());
    h.run_until_done();
    REQUIRE(streaming->finishes == 1);
    REQUIRE(longer->finishes == 1);
    REQUIRE_FALSE(longer->at.empty());
    race out{longer->tokens, 0};
    for (int t : streaming->at) out.streamed_before_first += t < longer->at.front() ? 1 : 0;
    return out;
}

}  // namespace

TEST_CASE("chunked prefill: the same tokens as one whole prefill, at any chunk size", "[engine][chunked]") {
    const auto prompt = calserve::test::random_prompt(21, 300);
    const auto expected = calserve::test::reference_greedy(calserve::test::tiny_model_dir(), prompt, 10);
    for (int chunk : {0, 1000, 64, 37, 1}) {
        INFO("chunk " << chunk);
        engine_harness h({"runtime.prefill_chunk=" + std::to_string(chunk), "runtime.prefill_chunk_ms=0"});
        auto sink = std::make_shared<calserve::test::recording_sink>();
        // A stream beside it: a prompt alone is never chunked (prefill_chunk_limit).
        auto beside = std::make_shared<calserve::test::recording_sink>();
        REQUIRE(h.engine->submit(h.greedy("beside", calserve::test::random_prompt(5, 4), 30), beside).ok());
        REQUIRE(h.engine->submit(h.greedy("r", prompt, 10), sink).ok());
        h.run_until_done();
        REQUIRE(sink->finishes == 1);
        CHECK(sink->tokens == expected);
        CHECK(sink->result.tokens.prompt_tokens == 300);
        CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
        CHECK(h.rt.failures().empty());
    }
}

TEST_CASE("chunked prefill: a decoding stream keeps streaming while a long prompt fills", "[engine][chunked]") {
    const auto whole = run_race(0);
    const auto chunked = run_race(32);
    CHECK(chunked.long_tokens == whole.long_tokens);
    // Whole: the long prompt's one prefill holds the device; chunked: a decode step between chunks.
    INFO("whole " << whole.streamed_before_first << ", chunked " << chunked.streamed_before_first);
    CHECK(chunked.streamed_before_first >= whole.streamed_before_first + 5);
}

TEST_CASE("chunked prefill: a prompt with nothing beside it runs whole, one job", "[engine][chunked]") {
    // Each chunk re-reads the weights: alone, a prompt pays nothing for the chunk size.
    const auto prompt = calserve::test::random_prompt(22, 300);
    auto jobs_for = [&](int chunk) {
        engine_harness h({"runtime.prefill_chunk=" + std::to_string(chunk), "runtime.prefill_chunk_ms=0", "runtime.prefix_cache=false"});
        int jobs = 0;  // the BatchTick's job hand-overs to the ChipSession
        h.rt.set_delivery_hook([&](const delivery& d) { jobs += d.type == "cs_run" ? 1 : 0; });
        auto sink = std::make_shared<calserve::test::recording_sink>();
        REQUIRE(h.engine->submit(h.greedy("alone", prompt, 1), sink).ok());
        h.run_until_done();
        h.rt.set_delivery_hook({});
        REQUIRE(sink->finishes == 1);
        CHECK(sink->tokens.size() == 1);
        return jobs;
    };
    CHECK(jobs_for(32) == 1);
    CHECK(jobs_for(0) == 1);
}
