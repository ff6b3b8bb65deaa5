// Liveness of the device path (deterministic runtime, virtual time, cpu backend
// paced by device.sim.step_ms):
//  - A job that takes longer than device.wait_timeout_ms by its expected cost is
//    waited for: the wait bound follows the device's expected completion (times
//    device.wait_cost_factor), the floor only catches hangs of cheap jobs.
//  - A job slowed beyond that bound (an injected slow_infer) is still caught and
//    recovered, with the same output.
//  - A busy refusal (submit_busy) of the warm-up's golden job is retried with the
//    jobs' backoff; it is not a failed reset, so it cannot push the device to Dead.
#include <catch2/catch.hpp>

#include "actors/device_actor.hpp"
#include "actors/kv_manager_actor.hpp"
#include "device/fault_points.hpp"
#include "tests/actors/engine_fixture.hpp"

using namespace calserve;
using namespace calserve::actors;
using calserve::test::engine_harness;
using calserve::test::recording_sink;
using device::arm_mode;
using device::fault_point;

namespace {

constexpr std::int64_t k_tokens = 6;

const std::vector<token_id>& prompt() {
    static const auto p = calserve::test::random_prompt(901, 12);
    return p;
}

const std::vector<token_id>& expected() {
    static const auto e = calserve::test::reference_greedy(calserve::test::tiny_model_dir(), prompt(), k_tokens);
    return e;
}

void check_stream(const recording_sink& s) {
    REQUIRE(s.finishes == 1);
    CHECK(s.result.reason == finish_reason::length);
    CHECK(s.tokens == expected());
}

}  // namespace

TEST_CASE("liveness: a job whose expected cost outlives device.wait_timeout_ms is waited for, not reset",
          "[engine][liveness]") {
    // Every job takes 500 ms of modelled compute against a 100 ms floor.
    engine_harness h({"log.level=off", "device.sim.step_ms=500", "device.wait_timeout_ms=100"});
    auto sink = std::make_shared<recording_sink>();
    REQUIRE(h.engine->submit(h.greedy("slow", prompt(), k_tokens), sink).ok());
    h.run_until_done();
    check_stream(*sink);
    CHECK(h.engine->device_resets() == 0);
    CHECK(h.engine->device_state() == device_health::ready);
}

TEST_CASE("liveness: a job slowed past the floor while its expected cost is nothing is a hang, and recovered",
          "[engine][liveness]") {
    // The same job at 500 ms, but the expectation is 0 (unpaced) and the slowdown injected:
    // the 100 ms floor catches it, the device recovers, the output is unchanged.
    engine_harness h({"log.level=off", "device.wait_timeout_ms=100"});
    device::fault_spec slow;
    slow.point = fault_point::slow_infer;
    slow.mode = arm_mode::once;
    slow.delay_ms = 500;
    auto sink = std::make_shared<recording_sink>();
    REQUIRE(h.engine->submit(h.greedy("hung", prompt(), k_tokens), sink).ok());
    REQUIRE(h.engine->faults()->arm(slow).ok());
    h.run_until_done();
    check_stream(*sink);
    CHECK(h.engine->device_resets() == 1);
}

TEST_CASE("liveness: a slowdown beyond wait_cost_factor x the expected cost is still caught",
          "[engine][liveness]") {
    // Expected 50 ms per job, bound max(10 ms, 4 x 50 ms) = 200 ms; the injected 2 s slowdown passes it.
    engine_harness h({"log.level=off", "device.sim.step_ms=50", "device.wait_timeout_ms=10"});
    device::fault_spec slow;
    slow.point = fault_point::slow_infer;
    slow.mode = arm_mode::once;
    slow.delay_ms = 2000;
    auto sink = std::make_shared<recording_sink>();
    REQUIRE(h.engine->submit(h.greedy("slowed", prompt(), k_tokens), sink).ok());
    REQUIRE(h.engine->faults()->arm(slow).ok());
    h.run_until_done();
    check_stream(*sink);
    CHECK(h.engine->device_resets() == 1);
}

TEST_CASE("liveness: a busy refusal of the golden job is retried, not counted as a failed reset",
          "[engine][liveness][faults]") {
    // reset_limit 0: a single failed reset would kill the device.
    engine_harness h({"log.level=off", "device.reset_limit=0"});
    device::fault_spec busy;
    busy.point = fault_point::submit_busy;
    busy.mode = arm_mode::count;
    busy.count = 3;
    busy.match.sequence = k_golden_sequence;
    device::fault_spec crash;
    crash.point = fault_point::ccu_exception;
    crash.mode = arm_mode::once;
    auto sink = std::make_shared<recording_sink>();
    REQUIRE(h.engine->submit(h.greedy("busy", prompt(), k_tokens), sink).ok());
    REQUIRE(h.engine->faults()->arm(busy).ok());
    REQUIRE(h.engine->faults()->arm(crash).ok());
    h.run_until_done();
    CHECK(h.engine->faults()->fires(fault_point::submit_busy) == 3);
    CHECK(h.engine->device_state() == device_health::ready);
    CHECK(h.engine->device_resets() == 1);
    check_stream(*sink);
}

TEST_CASE("liveness: a request whose jobs always fail fails alone after runtime.max_job_retries; the others finish",
          "[engine][liveness][faults]") {
    engine_harness h({"log.level=off", "runtime.max_job_retries=2"});
    constexpr int k_others = 4;
    std::vector<std::vector<token_id>> prompts, expect;
    for (int i = 0; i < k_others; ++i) {
        prompts.push_back(calserve::test::random_prompt(910 + i, 8 + i));
        expect.push_back(calserve::test::reference_greedy(calserve::test::tiny_model_dir(), prompts.back(), k_tokens));
    }
    // The poison request is admitted first: its sequence (= request number) is 1.
    device::fault_spec poison;
    poison.point = fault_point::ccu_exception;
    poison.mode = arm_mode::always;
    poison.match.sequence = 1;
    REQUIRE(h.engine->faults()->arm(poison).ok());
    auto bad = std::make_shared<recording_sink>();
    REQUIRE(h.engine->submit(h.greedy("poison", prompt(), k_tokens), bad).ok());
    std::vector<std::shared_ptr<recording_sink>> good;
    for (int i = 0; i < k_others; ++i) {
        good.push_back(std::make_shared<recording_sink>());
        REQUIRE(h.engine->submit(h.greedy("ok" + std::to_string(i), prompts[std::size_t(i)], k_tokens), good.back()).ok());
    }
    h.run_until_done();

    REQUIRE(bad->finishes == 1);
    CHECK(bad->result.reason == finish_reason::error);
    REQUIRE(bad->result.failure);
    CHECK(bad->result.failure->code == status::job_retries_exhausted);
    for (int i = 0; i < k_others; ++i) {
        INFO("stream " << i);
        REQUIRE(good[std::size_t(i)]->finishes == 1);
        CHECK(good[std::size_t(i)]->result.reason == finish_reason::length);
        CHECK(good[std::size_t(i)]->tokens == expect[std::size_t(i)]);
    }
    // One failed job and two retries: three faults, three resets that took, never dead.
    CHECK(h.engine->faults()->fires(fault_point::ccu_exception) == 3);
    CHECK(h.engine->device_resets() == 3);
    CHECK(h.engine->device_state() == device_health::ready);
    CHECK(h.metrics.request_retries_exhausted.value() == 1);
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
}
