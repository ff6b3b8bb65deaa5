// The device clock of a request (generation_result::device_s / device_steps):
// accumulated by the Request actor from the modelled compute time the DeviceActor
// reports per job, on the deterministic runtime with the simulator's latency
// model (sim backend), so the figures are exact functions of virtual time.
#include <catch2/catch.hpp>

#include "actors/device_actor.hpp"
#include "tests/actors/engine_fixture.hpp"

using namespace calserve;
using namespace calserve::actors;
using calserve::test::recording_sink;

namespace {

// A deterministic engine on a calbin package: device jobs take modelled time.
struct sim_engine : calserve::test::engine_harness {
    sim_engine() : engine_harness(calserve::test::on_package, {"log.level=warn"}) {}
};

}  // namespace

TEST_CASE("device time per request: one step per token, summing to the device busy time", "[engine][timing]") {
    sim_engine h;
    const double busy_before = h.metrics.device_busy_seconds.value();
    std::vector<std::shared_ptr<recording_sink>> sinks;
    for (int i = 0; i < 3; ++i) {
        sinks.push_back(std::make_shared<recording_sink>());
        auto prompt = calserve::test::random_prompt(40 + i, 8 + 4 * i);
        REQUIRE(h.engine->submit(h.greedy("d" + std::to_string(i), prompt, 5 + i), sinks.back()).ok());
    }
    h.run_until_done();
    double device_total = 0;
    for (std::size_t i = 0; i < sinks.size(); ++i) {
        const auto& r = sinks[i]->result;
        REQUIRE(sinks[i]->finishes == 1);
        REQUIRE(r.reason == finish_reason::length);
        // One device job (the prefill, then one decode step each) per sampled token.
        CHECK(r.device_steps == r.tokens.completion_tokens);
        CHECK(r.device_steps == std::int64_t(5 + i));
        CHECK(r.device_first_s > 0);
        CHECK(r.device_first_s < r.device_s);
        // Virtual time: the request's jobs run one after another inside its lifetime.
        CHECK(r.device_s <= r.e2e_s);
        CHECK(r.device_first_s <= r.ttft_s);
        // The host sees each job last at least its modelled compute, and within the request.
        CHECK(r.device_wall_s >= r.device_s);
        CHECK(r.device_wall_s <= r.e2e_s + 1e-9);  // chained jobs' walls abut: summing may round up
        device_total += r.device_s;
    }
    // Every job's compute is attributed once: to its request, or split evenly over a batch's rows.
    CHECK(device_total == Approx(h.metrics.device_busy_seconds.value() - busy_before).epsilon(1e-9));
    CHECK(h.rt.failures().empty());
}

TEST_CASE("device time is zero for a request cancelled before any job ran", "[engine][timing]") {
    sim_engine h;
    auto sink = std::make_shared<recording_sink>();
    REQUIRE(h.engine->submit(h.greedy("c0", calserve::test::random_prompt(7, 6), 4), sink).ok());
    h.engine->cancel("c0");
    h.run_until_done();
    REQUIRE(sink->finishes == 1);
    CHECK(sink->result.reason == finish_reason::cancelled);
    CHECK(sink->result.device_steps == std::int64_t(sink->tokens.size()));
    if (sink->tokens.empty()) CHECK(sink->result.device_s == 0);
}
