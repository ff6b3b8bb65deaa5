// The prefix cache end to end on the deterministic runtime (cpu backend, the tiny
// reference transformer): a request served from cached KV returns exactly the
// tokens it returns without the cache (greedy and seeded), reports the cached
// prompt tokens, never shares across cache_salt, gives cached KV back when KV is
// needed instead of refusing, and loses every entry at a device reset.
#include <catch2/catch.hpp>

#include "actors/kv_manager_actor.hpp"
#include "device/fault_points.hpp"
#include "tests/actors/engine_fixture.hpp"

using namespace calserve;
using namespace calserve::actors;
using calserve::test::engine_harness;
using calserve::test::recording_sink;

namespace {

struct outcome {
    std::vector<token_id> tokens;
    std::int64_t cached = 0;
    finish_reason reason = finish_reason::error;
};

outcome serve(engine_harness& h, generation_request req) {
    auto sink = std::make_shared<recording_sink>();
    REQUIRE(h.engine->submit(std::move(req), sink).ok());
    h.run_until_done();
    REQUIRE(sink->finishes == 1);
    return {sink->tokens, sink->result.tokens.cached_tokens, sink->result.reason};
}

generation_request seeded(engine_harness& h, std::string id, std::vector<token_id> prompt, std::int64_t n) {
    auto r = h.greedy(std::move(id), std::move(prompt), n);
    r.sampling.temperature = 0.9f;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = 1234;
    return r;
}

// Three turns of one conversation: each re-sends the history plus new tokens.
std::vector<outcome> conversation(engine_harness& h, bool sampled) {
    std::vector<outcome> out;
    std::vector<token_id> history;
    for (int turn = 0; turn < 3; ++turn) {
        auto add = calserve::test::random_prompt(700 + turn, 70);
        history.insert(history.end(), add.begin(), add.end());
        auto id = "turn" + std::to_string(turn);
        out.push_back(serve(h, sampled ? seeded(h, id, history, 10) : h.greedy(id, history, 10)));
        history.insert(history.end(), out.back().tokens.begin(), out.back().tokens.end());
    }
    return out;
}

}  // namespace

TEST_CASE("prefix cache: a conversation's turns hit and return exactly the tokens of a cold run",
          "[engine][prefix_cache]") {
    for (bool sampled : {false, true}) {
        INFO("sampled " << sampled);
        engine_harness cold({"runtime.prefix_cache=false"});
        engine_harness warm;
        auto a = conversation(cold, sampled);
        auto b = conversation(warm, sampled);
        for (std::size_t t = 0; t < a.size(); ++t) {
            INFO("turn " << t);
            CHECK(b[t].tokens == a[t].tokens);
            CHECK(a[t].cached == 0);
        }
        CHECK(b[0].cached == 0);
        // Turn 2 re-sends 70 + 10 + 70 tokens; the first turn left 79 in KV: one 64-token block.
        CHECK(b[1].cached == 64);
        // Turn 3: turn 2 left 150 + 9 = 159 in KV: two blocks.
        CHECK(b[2].cached == 128);
        CHECK(warm.metrics.prefix_cache_hits.value() == 192);
        CHECK(warm.engine->kv_manager().pool().reserved_blocks() == 0);
        CHECK(warm.rt.failures().empty());
    }
}

TEST_CASE("prefix cache: the same prompt again is served from cache, the greedy reference unchanged",
          "[engine][prefix_cache]") {
    engine_harness h;
    auto prompt = calserve::test::random_prompt(31, 150);
    const auto expected = calserve::test::reference_greedy(calserve::test::tiny_model_dir(), prompt, 12);
    auto first = serve(h, h.greedy("a", prompt, 12));
    auto second = serve(h, h.greedy("b", prompt, 12));
    CHECK(first.tokens == expected);
    CHECK(second.tokens == expected);
    CHECK(first.cached == 0);
    CHECK(second.cached == 128);  // the last prompt token is always prefilled: 149 -> two blocks
    // Another tenant's salt never shares, and gets the same tokens.
    auto salted = h.greedy("c", prompt, 12);
    salted.cache_salt = "tenant-2";
    auto third = serve(h, std::move(salted));
    CHECK(third.cached == 0);
    CHECK(third.tokens == expected);
    CHECK(h.metrics.prefix_cache_queries.value() == 450);
    CHECK(h.engine->kv_manager().cache().consistent());
}

TEST_CASE("prefix cache: cached KV is evicted when KV is needed, never refused for", "[engine][prefix_cache]") {
    // 6 blocks of 64 tokens (tiny packages' block size is their own; kv_blocks caps it).
    engine_harness h({"runtime.kv_blocks=6", "runtime.kv_policy=reserve"});
    const auto block = h.engine->kv_manager().pool().block_tokens();
    // Fill the cache with finished sequences, each keeping whole blocks.
    for (int i = 0; i < 4; ++i) (void)serve(h, h.greedy("fill" + std::to_string(i), calserve::test::random_prompt(50 + i, int(block)), 4));
    CHECK(h.engine->kv_manager().pool().cached_blocks() > 0);
    // A request that needs every block is admitted at once: the cache gives its blocks back.
    const auto all = 6 * block;
    auto big = serve(h, h.greedy("big", calserve::test::random_prompt(90, int(all - 8)), 8));
    CHECK(big.reason == finish_reason::length);
    CHECK(h.metrics.prefix_cache_evictions.value() > 0);
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
}

TEST_CASE("prefix cache: a device reset drops every cached sequence; recovery is exact", "[engine][prefix_cache]") {
    engine_harness h;
    auto prompt = calserve::test::random_prompt(77, 140);
    const auto expected = calserve::test::reference_greedy(calserve::test::tiny_model_dir(), prompt, 6);
    CHECK(serve(h, h.greedy("a", prompt, 6)).tokens == expected);
    REQUIRE(h.engine->kv_manager().cache().entries() == 1);
    device::fault_spec once;
    once.point = device::fault_point::ccu_exception;
    once.mode = device::arm_mode::once;
    REQUIRE(h.engine->faults()->arm(once).ok());
    auto hit = serve(h, h.greedy("b", prompt, 6));  // its prefill faults: the device resets
    CHECK(hit.tokens == expected);
    CHECK(h.engine->device_resets() >= 1);
    // The entry that existed before the reset is gone; the re-prefilled sequence may be cached anew.
    auto again = serve(h, h.greedy("c", prompt, 6));
    CHECK(again.tokens == expected);
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
    CHECK(h.engine->kv_manager().cache().consistent());
}

TEST_CASE("prefix cache: a failed copy falls back to a full prefill with the same tokens", "[engine][prefix_cache]") {
    engine_harness h;
    auto prompt = calserve::test::random_prompt(78, 140);
    auto first = serve(h, h.greedy("a", prompt, 6));
    device::fault_spec once;
    once.point = device::fault_point::kv_copy_fail;
    once.mode = device::arm_mode::once;
    REQUIRE(h.engine->faults()->arm(once).ok());
    auto second = serve(h, h.greedy("b", prompt, 6));
    CHECK(h.engine->faults()->fires(device::fault_point::kv_copy_fail) == 1);
    CHECK(second.tokens == first.tokens);
    CHECK(second.cached == 0);
    CHECK(h.engine->device_resets() == 0);
}

namespace {
// What the HTTP API does for `n` choices (net/generate_http.cpp): choice 0 first; the
// others once it has a token, so its prompt's KV is on the device and indexed as a
// running entry; choice i seeded with seed + i.
std::vector<outcome> choices(engine_harness& h, const std::vector<token_id>& prompt, int n, std::int64_t max_tokens) {
    std::vector<std::shared_ptr<recording_sink>> sinks;
    for (int i = 0; i < n; ++i) sinks.push_back(std::make_shared<recording_sink>());
    auto request = [&](int i) {
        auto r = seeded(h, "choice" + std::to_string(i), prompt, max_tokens);
        r.sampling.seed = *r.sampling.seed + std::uint64_t(i);
        return r;
    };
    REQUIRE(h.engine->submit(request(0), sinks[0]).ok());
    h.rt.run_until_idle();
    while (sinks[0]->tokens.empty() && sinks[0]->finishes == 0 && h.rt.advance_to_next_timer()) h.rt.run_until_idle();
    REQUIRE(!sinks[0]->tokens.empty());
    for (int i = 1; i < n; ++i) REQUIRE(h.engine->submit(request(i), sinks[std::size_t(i)]).ok());
    h.run_until_done();
    std::vector<outcome> out;
    for (auto& s : sinks) {
        REQUIRE(s->finishes == 1);
        out.push_back({s->tokens, s->result.tokens.cached_tokens, s->result.reason});
    }
    return out;
}
}  // namespace

TEST_CASE("prefix cache: n choices copy the first choice's running prompt and equal their solo runs",
          "[engine][prefix_cache]") {
    auto prompt = calserve::test::random_prompt(91, 150);
    engine_harness cold({"runtime.prefix_cache=false"});
    std::vector<outcome> solo;
    for (int i = 0; i < 4; ++i) {
        auto r = seeded(cold, "solo" + std::to_string(i), prompt, 12);
        r.sampling.seed = *r.sampling.seed + std::uint64_t(i);
        solo.push_back(serve(cold, std::move(r)));
    }
    engine_harness warm;
    auto forked = choices(warm, prompt, 4, 12);
    for (std::size_t i = 0; i < forked.size(); ++i) {
        INFO("choice " << i);
        CHECK(forked[i].tokens == solo[i].tokens);
        CHECK(forked[i].reason == finish_reason::length);
        // Choice 0 prefilled the prompt; the others copied its two whole blocks while it ran.
        CHECK(forked[i].cached == (i == 0 ? 0 : 128));
    }
    CHECK(solo[1].tokens != solo[0].tokens);  // the seeds differ, so do the choices
    const auto& kv = warm.engine->kv_manager();
    CHECK(kv.pool().reserved_blocks() == 0);
    CHECK(kv.cache().running_entries() == 0);
    CHECK(kv.cache().consistent());
    CHECK(warm.rt.failures().empty());
}

TEST_CASE("prefix cache: concurrent requests share a running prompt; a reset mid-run stays exact",
          "[engine][prefix_cache]") {
    auto prompt = calserve::test::random_prompt(92, 200);
    const auto expected = calserve::test::reference_greedy(calserve::test::tiny_model_dir(), prompt, 10);
    engine_harness h;
    auto first = std::make_shared<recording_sink>();
    REQUIRE(h.engine->submit(h.greedy("a", prompt, 10), first).ok());
    h.rt.run_until_idle();
    while (first->tokens.empty() && h.rt.advance_to_next_timer()) h.rt.run_until_idle();
    // A reset while "a" runs drops its running entry with everything else.
    device::fault_spec once;
    once.point = device::fault_point::ccu_exception;
    once.mode = device::arm_mode::once;
    REQUIRE(h.engine->faults()->arm(once).ok());
    auto second = std::make_shared<recording_sink>();
    REQUIRE(h.engine->submit(h.greedy("b", prompt, 10), second).ok());
    h.run_until_done();
    CHECK(first->tokens == expected);
    CHECK(second->tokens == expected);
    CHECK(h.engine->device_resets() >= 1);
    const auto& kv = h.engine->kv_manager();
    CHECK(kv.pool().reserved_blocks() == 0);
    CHECK(kv.cache().running_entries() == 0);
    CHECK(kv.cache().consistent());
}
