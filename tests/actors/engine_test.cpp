// Serving engine end to end on the deterministic runtime: the six actors, the
// simulated device at zero pacing (cpu backend) and the reference transformer.
#include <catch2/catch.hpp>
#include <random>

#include "actors/batch_tick_actor.hpp"
#include "actors/device_actor.hpp"
#include "actors/kv_manager_actor.hpp"
#include "actors/runtime/lifecycle.hpp"
#include "device/fault_points.hpp"
#include "tests/actors/engine_fixture.hpp"

using namespace calserve;
using namespace calserve::actors;
using calserve::test::engine_harness;
using calserve::test::recording_sink;

TEST_CASE("greedy generation equals the reference transformer", "[engine]") {
    engine_harness h;
    auto prompt = calserve::test::random_prompt(1, 13);
    auto sink = std::make_shared<recording_sink>();
    REQUIRE(h.engine->submit(h.greedy("r1", prompt, 12), sink).ok());
    h.run_until_done();
    REQUIRE(sink->finishes == 1);
    CHECK(sink->result.reason == finish_reason::length);
    CHECK(sink->result.tokens.prompt_tokens == 13);
    CHECK(sink->result.tokens.completion_tokens == 12);
    REQUIRE(sink->tokens == calserve::test::reference_greedy(calserve::test::tiny_model_dir(), prompt, 12));
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
    CHECK(h.rt.failures().empty());
}

TEST_CASE("submit rejects over-length prompts and bad ids before any device work", "[engine]") {
    engine_harness h({"runtime.slot_context=64"});
    auto sink = std::make_shared<recording_sink>();
    auto r = h.engine->submit(h.greedy("long", calserve::test::random_prompt(2, 60), 8), sink);
    REQUIRE(r.code() == status::context_overflow);
    REQUIRE_THAT(r.error().message, Catch::Contains("usable context of 64"));
    REQUIRE(h.engine->submit(h.greedy("bad", {-1}, 8), sink).code() == status::invalid_argument);
    REQUIRE(h.engine->submit(h.greedy("empty", {}, 8), sink).code() == status::invalid_argument);
    REQUIRE(h.engine->in_flight() == 0);
    REQUIRE(sink->finishes == 0);
}

TEST_CASE("32 concurrent streams with cancels and deadlines: exactly-once ends, no cross-talk", "[engine]") {
    engine_harness h({"runtime.max_running=8"});
    std::mt19937 rng(42);
    struct stream {
        std::vector<token_id> prompt;
        std::int64_t max_tokens;
        std::shared_ptr<recording_sink> sink;
        bool cancel = false;
    };
    std::vector<stream> streams;
    for (int i = 0; i < 32; ++i) {
        stream s{calserve::test::random_prompt(100 + i, 1 + int(rng() % 20)), 1 + std::int64_t(rng() % 10), std::make_shared<recording_sink>()};
        auto req = h.greedy("s" + std::to_string(i), s.prompt, s.max_tokens);
        if (i % 7 == 3) req.timeout = std::chrono::milliseconds(1);  // expires in virtual time before finishing
        s.cancel = i % 5 == 1;
        REQUIRE(h.engine->submit(std::move(req), s.sink).ok());
        streams.push_back(std::move(s));
    }
    for (int i = 0; i < 32; ++i)
        if (streams[std::size_t(i)].cancel) h.engine->cancel("s" + std::to_string(i));
    h.run_until_done();
    REQUIRE(h.engine->in_flight() == 0);
    int finished = 0;
    for (auto& s : streams) {
        REQUIRE(s.sink->finishes == 1);
        if (s.sink->result.reason == finish_reason::length) {
            ++finished;
            REQUIRE(s.sink->tokens ==
                    calserve::test::reference_greedy(calserve::test::tiny_model_dir(), s.prompt, s.max_tokens));
        }
    }
    CHECK(finished > 10);
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
    CHECK(h.engine->kv_manager().pool().conserved());
    CHECK(h.engine->batch_tick().sequences() == 0);
    CHECK(h.rt.failures().empty());
}

TEST_CASE("a device fault mid-stream is recovered: same greedy output, one reset", "[engine][faults]") {
    engine_harness h;
    auto prompt = calserve::test::random_prompt(3, 9);
    auto expected = calserve::test::reference_greedy(calserve::test::tiny_model_dir(), prompt, 16);
    auto sink = std::make_shared<recording_sink>();
    REQUIRE(h.engine->submit(h.greedy("f1", prompt, 16), sink).ok());
    h.rt.run_until_idle();
    while (sink->tokens.size() < 5 && h.rt.advance_to_next_timer()) {
    }
    REQUIRE(sink->tokens.size() >= 5);
    device::fault_spec spec;
    spec.point = device::fault_point::ccu_exception;
    spec.mode = device::arm_mode::once;
    REQUIRE(h.engine->faults()->arm(spec).ok());
    h.run_until_done();
    CHECK(h.engine->faults()->fires(device::fault_point::ccu_exception) == 1);
    REQUIRE(sink->finishes == 1);
    REQUIRE(sink->result.reason == finish_reason::length);
    REQUIRE(sink->tokens == expected);
    CHECK(h.engine->device_resets() == 1);
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
}
