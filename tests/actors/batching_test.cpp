// Continuous batching on the deterministic runtime: batch composition changing
// every step, outputs equal to solo runs, preemption by recompute under a KV
// cap, and device faults with batches in flight.
#include <algorithm>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <random>

#include "actors/batch_tick_actor.hpp"
#include "actors/kv_manager_actor.hpp"
#include "device/fault_points.hpp"
#include "tests/actors/engine_fixture.hpp"

using namespace calserve;
using namespace calserve::actors;
using calserve::test::engine_harness;
using calserve::test::recording_sink;

namespace {

struct stream {
    std::string id;
    generation_request request;
    std::shared_ptr<recording_sink> sink = std::make_shared<recording_sink>();
};

generation_request seeded(engine_harness& h, std::string id, std::vector<token_id> prompt, std::int64_t max_tokens,
                          std::uint64_t seed) {
    auto r = h.greedy(std::move(id), std::move(prompt), max_tokens);
    r.sampling.temperature = 0.9f;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = seed;
    return r;
}

// The tokens of `request` run alone on a fresh engine with the same configuration.
std::vector<token_id> solo(const std::vector<std::string>& overrides, bool package, generation_request request) {
    auto h = package ? std::make_unique<engine_harness>(calserve::test::on_package, overrides)
                     : std::make_unique<engine_harness>(overrides);
    auto sink = std::make_shared<recording_sink>();
    REQUIRE(h->engine->submit(std::move(request), sink).ok());
    h->run_until_done();
    REQUIRE(sink->finishes == 1);
    return sink->tokens;
}

double mean_batch(const engine_harness& h) {
    const auto& b = h.metrics.batch_size;
    return b.count() == 0 ? 0.0 : b.sum() / double(b.count());
}

}  // namespace

TEST_CASE("batched greedy and seeded streams equal their solo runs", "[engine][batching]") {
    const std::vector<std::string> cfg{"runtime.max_batch=8", "log.level=warn"};
    engine_harness h(cfg);
    std::vector<stream> streams;
    for (int i = 0; i < 12; ++i) {
        auto prompt = calserve::test::random_prompt(300 + i, 3 + i % 9);
        stream s;
        s.id = "b" + std::to_string(i);
        s.request = i % 3 == 0 ? seeded(h, s.id, prompt, 6 + i % 5, 1000 + std::uint64_t(i)) : h.greedy(s.id, prompt, 6 + i % 5);
        streams.push_back(std::move(s));
    }
    for (auto& s : streams) REQUIRE(h.engine->submit(s.request, s.sink).ok());
    h.run_until_done();
    CHECK(mean_batch(h) > 1.5);  // batches actually formed
    for (auto& s : streams) {
        INFO(s.id);
        REQUIRE(s.sink->finishes == 1);
        CHECK(s.sink->result.reason == finish_reason::length);
        CHECK(s.sink->tokens == solo(cfg, false, s.request));
    }
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
    CHECK(h.rt.failures().empty());
}

TEST_CASE("rows ending on a stop id stop there and no row runs a step past its end", "[engine][batching]") {
    // A row whose token cannot end it goes on before its Request answers; a stop id
    // must still end it at once, and an answer for an earlier token must not let it
    // run one more step. Decode rows (the batch_size histogram's sum) count every step.
    const std::vector<std::string> cfg{"runtime.max_batch=8", "log.level=warn"};
    engine_harness h(cfg);
    constexpr std::int64_t k_max = 12;
    std::vector<stream> streams;
    std::vector<std::vector<token_id>> expected;
    double decode_rows = 0;
    for (int i = 0; i < 10; ++i) {
        stream s;
        s.id = "e" + std::to_string(i);
        s.request = h.greedy(s.id, calserve::test::random_prompt(700 + i, 3 + i % 7), k_max);
        auto full = solo(cfg, false, s.request);
        REQUIRE(full.size() == std::size_t(k_max));
        auto want = full;
        if (i % 2 == 0) {
            s.request.stop_token_ids = {full[std::size_t(2 + i % 5)]};
            want.assign(full.begin(), std::find(full.begin(), full.end(), full[std::size_t(2 + i % 5)]));
        }
        const auto sampled = want.size() + (want.size() < full.size() ? 1 : 0);  // the stop id is sampled too
        decode_rows += double(sampled - 1);  // the first token comes from the prefill
        expected.push_back(std::move(want));
        streams.push_back(std::move(s));
    }
    for (auto& s : streams) REQUIRE(h.engine->submit(s.request, s.sink).ok());
    h.run_until_done();
    CHECK(mean_batch(h) > 1.5);
    for (std::size_t i = 0; i < streams.size(); ++i) {
        INFO(streams[i].id);
        REQUIRE(streams[i].sink->finishes == 1);
        CHECK(streams[i].sink->tokens == expected[i]);
        CHECK(streams[i].sink->result.reason ==
              (expected[i].size() < std::size_t(k_max) ? finish_reason::stop : finish_reason::length));
    }
    CHECK(h.metrics.batch_size.sum() == decode_rows);
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
    CHECK(h.rt.failures().empty());
}

TEST_CASE("batch composition changes every step under arrivals, cancels, deadlines and finishes", "[engine][batching]") {
    const std::vector<std::string> cfg{"runtime.max_batch=16", "log.level=warn"};
    engine_harness h(calserve::test::on_package, cfg);
    std::mt19937 rng(7);
    std::vector<stream> streams;
    for (int wave = 0; wave < 4; ++wave) {
        for (int i = 0; i < 6; ++i) {
            const int n = wave * 6 + i;
            stream s;
            s.id = "w" + std::to_string(n);
            auto prompt = calserve::test::random_prompt(500 + n, 2 + int(rng() % 14));
            s.request = n % 4 == 1 ? seeded(h, s.id, prompt, 4 + std::int64_t(rng() % 20), 77 + std::uint64_t(n))
                                   : h.greedy(s.id, prompt, 4 + std::int64_t(rng() % 20));
            if (n % 7 == 5) s.request.timeout = std::chrono::milliseconds(3);  // ends mid-stream in virtual time
            REQUIRE(h.engine->submit(s.request, s.sink).ok());
            streams.push_back(std::move(s));
        }
        h.rt.run_for(std::chrono::milliseconds(2));
        if (wave == 1) h.engine->cancel("w2");
        if (wave == 2) h.engine->cancel("w9");
    }
    h.run_until_done();
    REQUIRE(h.engine->in_flight() == 0);
    CHECK(mean_batch(h) > 2.0);
    // Under the sanitizers every other stream is replayed solo (the Release suite replays all).
    const std::size_t stride = std::getenv("CALSERVE_SANITIZED") ? 2 : 1;
    int compared = 0;
    for (std::size_t i = 0; i < streams.size(); ++i) {
        auto& s = streams[i];
        INFO(s.id);
        REQUIRE(s.sink->finishes == 1);
        if (s.sink->result.reason != finish_reason::length || i % stride != 0) continue;
        CHECK(s.sink->tokens == solo(cfg, true, s.request));
        ++compared;
    }
    CHECK(compared >= int(15 / stride));
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
    CHECK(h.engine->kv_manager().pool().conserved());
    CHECK(h.engine->batch_tick().sequences() == 0);
    CHECK(h.rt.failures().empty());
}

TEST_CASE("preemption under a KV cap: all complete, outputs equal solo runs, KV conserved", "[engine][batching][kv]") {
    // 16-token blocks, 12 blocks in all: eight sequences of up to 70 tokens cannot all hold their KV.
    const std::vector<std::string> cfg{"runtime.max_batch=8", "device.sim.kv_block_tokens=16", "runtime.kv_blocks=12",
                                       "runtime.kv_step_tokens=16", "log.level=warn"};
    engine_harness h(cfg);
    std::vector<stream> streams;
    for (int i = 0; i < 8; ++i) {
        stream s;
        s.id = "p" + std::to_string(i);
        auto prompt = calserve::test::random_prompt(700 + i, 6 + i);
        s.request = i % 2 ? seeded(h, s.id, prompt, 48 + i, 5 + std::uint64_t(i)) : h.greedy(s.id, prompt, 48 + i);
        REQUIRE(h.engine->submit(s.request, s.sink).ok());
        streams.push_back(std::move(s));
    }
    h.run_until_done();
    CHECK(h.engine->batch_tick().preemptions() > 0);
    CHECK(h.metrics.preemptions_total.value() == double(h.engine->batch_tick().preemptions()));
    for (auto& s : streams) {
        INFO(s.id);
        REQUIRE(s.sink->finishes == 1);
        REQUIRE(s.sink->result.reason == finish_reason::length);
        CHECK(s.sink->tokens.size() == std::size_t(s.request.max_tokens));
        CHECK(s.sink->tokens == solo(cfg, false, s.request));
    }
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
    CHECK(h.engine->kv_manager().pool().conserved());
    CHECK(h.rt.failures().empty());
}

TEST_CASE("kv_policy=reserve never grows nor preempts", "[engine][batching][kv]") {
    engine_harness h({"runtime.max_batch=8", "runtime.kv_policy=reserve", "log.level=warn"});
    std::vector<stream> streams;
    for (int i = 0; i < 6; ++i) {
        stream s;
        s.id = "r" + std::to_string(i);
        s.request = h.greedy(s.id, calserve::test::random_prompt(800 + i, 5), 20);
        REQUIRE(h.engine->submit(s.request, s.sink).ok());
        streams.push_back(std::move(s));
    }
    h.run_until_done();
    for (auto& s : streams) REQUIRE(s.sink->finishes == 1);
    CHECK(h.engine->batch_tick().preemptions() == 0);
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
}

TEST_CASE("a device fault with batches in flight re-prefills every row: same outputs, one reset", "[engine][batching][faults]") {
    const std::vector<std::string> cfg{"runtime.max_batch=16", "log.level=warn"};
    engine_harness h(calserve::test::on_package, cfg);
    std::vector<stream> streams;
    for (int i = 0; i < 10; ++i) {
        stream s;
        s.id = "f" + std::to_string(i);
        s.request = h.greedy(s.id, calserve::test::random_prompt(900 + i, 4 + i), 24);
        REQUIRE(h.engine->submit(s.request, s.sink).ok());
        streams.push_back(std::move(s));
    }
    h.rt.run_for(std::chrono::milliseconds(3));  // every stream is decoding in batches by now
    device::fault_spec f;
    f.point = device::fault_point::ccu_exception;
    REQUIRE(h.engine->faults()->arm(f).ok());
    h.run_until_done();
    CHECK(h.engine->device_resets() == 1);
    CHECK(h.metrics.requests_recovered.value() >= 2);
    for (auto& s : streams) {
        INFO(s.id);
        REQUIRE(s.sink->finishes == 1);
        REQUIRE(s.sink->result.reason == finish_reason::length);
        CHECK(s.sink->tokens == solo(cfg, true, s.request));
    }
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
    CHECK(h.rt.failures().empty());
}
