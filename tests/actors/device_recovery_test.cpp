// Device recovery under bursts and after death (deterministic runtime, virtual
// time, cpu backend: a device job takes no virtual time, so every gap between two
// fires below is the DeviceActor's own reset backoff).
//  - A short burst of ccu_exception (armed `always`, cleared 6 ms later) used to
//    exhaust device.reset_limit within the burst; with the backoff it is recovered
//    and the streams equal the fault-free reference.
//  - The waits between reset attempts follow reset_backoff x 2^(k-1) with equal
//    jitter, and the same seed draws the same waits (replay stays identical).
//  - A dead device comes back on an operator's reset once the fault is cleared.
//  - client_stall has no consumer in an engine without a network layer: arming it
//    is refused as unsupported.
#include <catch2/catch.hpp>
#include <span>

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
using std::chrono::milliseconds;

namespace {

constexpr int k_streams = 3;
constexpr std::int64_t k_tokens = 10;

const std::vector<token_id>& prompt(int i) {
    static const std::vector<std::vector<token_id>> p = [] {
        std::vector<std::vector<token_id>> out;
        for (int s = 0; s < k_streams; ++s) out.push_back(calserve::test::random_prompt(300 + s, 6 + 2 * s));
        return out;
    }();
    return p[std::size_t(i)];
}

const std::vector<token_id>& expected(int i) {
    static const std::vector<std::vector<token_id>> e = [] {
        std::vector<std::vector<token_id>> out;
        for (int s = 0; s < k_streams; ++s)
            out.push_back(calserve::test::reference_greedy(calserve::test::tiny_model_dir(), prompt(s), k_tokens));
        return out;
    }();
    return e[std::size_t(i)];
}

device::fault_spec always(fault_point p) {
    device::fault_spec s;
    s.point = p;
    s.mode = arm_mode::always;
    return s;
}

// Virtual times of every ccu_exception fire.
std::shared_ptr<std::vector<nanoseconds>> record_fires(engine_harness& h) {
    auto times = std::make_shared<std::vector<nanoseconds>>();
    h.engine->faults()->set_fire_observer([times, rt = &h.rt](const device::fault_fire& f) {
        if (f.point == fault_point::ccu_exception) times->push_back(rt->now());
    });
    return times;
}

// Submits the streams and runs until each has produced a token.
std::vector<std::shared_ptr<recording_sink>> start_streams(engine_harness& h, const std::string& tag) {
    std::vector<std::shared_ptr<recording_sink>> sinks;
    for (int i = 0; i < k_streams; ++i) {
        sinks.push_back(std::make_shared<recording_sink>());
        REQUIRE(h.engine->submit(h.greedy(tag + std::to_string(i), prompt(i), k_tokens), sinks.back()).ok());
    }
    h.rt.run_until_idle();
    auto started = [&] {
        for (auto& s : sinks)
            if (s->tokens.empty()) return false;
        return true;
    };
    while (!started() && h.rt.advance_to_next_timer()) {
    }
    REQUIRE(started());
    return sinks;
}

// Arms ccu_exception `always` and clears it `burst` of virtual time later.
void burst_of_ccu_exception(engine_harness& h, nanoseconds burst) {
    REQUIRE(h.engine->faults()->arm(always(fault_point::ccu_exception)).ok());
    auto faults = h.engine->faults();
    h.rt.schedule_after(h.rt.context().get_executor(), burst, [faults] { faults->clear(fault_point::ccu_exception); });
}

// The distinct instants of `times` (both slots' jobs and the first golden job fail
// at the fault's instant: device jobs take no virtual time here).
std::vector<nanoseconds> instants(const std::vector<nanoseconds>& times) {
    std::vector<nanoseconds> out;
    for (auto t : times)
        if (out.empty() || out.back() != t) out.push_back(t);
    return out;
}

// Runs an always-failing device to death; returns the fire times.
std::vector<nanoseconds> fires_until_dead(std::vector<std::string> overrides) {
    engine_harness h(std::move(overrides));
    auto fires = record_fires(h);
    auto sinks = start_streams(h, "d");
    REQUIRE(h.engine->faults()->arm(always(fault_point::ccu_exception)).ok());
    h.run_until_done();
    REQUIRE(h.engine->device_state() == device_health::dead);
    return *fires;
}

}  // namespace

TEST_CASE("device recovery: a 6 ms burst of ccu_exception is spread by the reset backoff and recovered",
          "[engine][faults][backoff]") {
    engine_harness h({"log.level=error"});
    auto fires = record_fires(h);
    auto sinks = start_streams(h, "b");
    burst_of_ccu_exception(h, milliseconds(6));
    h.run_until_done();

    CHECK(h.engine->device_state() == device_health::ready);
    for (int i = 0; i < k_streams; ++i) {
        INFO("stream " << i);
        REQUIRE(sinks[std::size_t(i)]->finishes == 1);
        CHECK(sinks[std::size_t(i)]->result.reason == finish_reason::length);
        CHECK(sinks[std::size_t(i)]->tokens == expected(i));
    }
    // The jobs in flight and the immediate first attempt's golden job fail at the
    // fault's instant; the next attempt waits at least half the 50 ms base, past
    // the burst, and succeeds.
    REQUIRE(fires->size() >= 2);
    CHECK(instants(*fires).size() == 1);
    CHECK(h.engine->device_resets() == 2);
    CHECK(h.metrics.faults_total.labels({"ccu_exception"}).value() == double(fires->size()));
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
}

TEST_CASE("device recovery: without the backoff the same burst kills the device",
          "[engine][faults][backoff]") {
    engine_harness h({"log.level=off", "device.reset_backoff_ms=0"});
    auto sinks = start_streams(h, "n");
    burst_of_ccu_exception(h, milliseconds(6));
    h.run_until_done();
    CHECK(h.engine->device_state() == device_health::dead);
    for (auto& s : sinks) CHECK(s->result.reason == finish_reason::error);
}

TEST_CASE("device recovery: reset attempts back off exponentially with seeded jitter",
          "[engine][faults][backoff]") {
    const std::vector<std::string> cfg{"log.level=off", "device.reset_backoff_ms=50", "device.reset_limit=3"};
    auto a = instants(fires_until_dead(cfg));
    // Fault and first attempt (at once), then attempts after 50, 100, 200 ms nominal,
    // each drawn in [d/2, d]; the 4th failed attempt exceeds the limit: dead, no further wait.
    REQUIRE(a.size() == 4);
    for (std::size_t k = 1; k < a.size(); ++k) {
        INFO("attempt " << k);
        const auto nominal = milliseconds(50) * (1 << (k - 1));
        CHECK(a[k] - a[k - 1] >= nominal / 2);
        CHECK(a[k] - a[k - 1] <= nominal);
    }
    CHECK(instants(fires_until_dead(cfg)) == a);  // the same seed draws the same waits
    auto other = cfg;
    other.push_back("device.sim.seed=7");
    CHECK(instants(fires_until_dead(other)) != a);

    auto capped = instants(fires_until_dead({"log.level=off", "device.reset_backoff_ms=50", "device.reset_backoff_max_ms=60"}));
    REQUIRE(capped.size() == 4);
    CHECK(capped[3] - capped[2] <= milliseconds(60));
}

TEST_CASE("device recovery: a dead device serves again after the fault is cleared and an operator reset",
          "[engine][faults][dead]") {
    engine_harness h({"log.level=off", "device.reset_backoff_ms=1"});
    auto sinks = start_streams(h, "x");
    REQUIRE(h.engine->faults()->arm(always(fault_point::ccu_exception)).ok());
    h.run_until_done();
    REQUIRE(h.engine->device_state() == device_health::dead);
    for (auto& s : sinks) CHECK(s->result.reason == finish_reason::error);

    // The cause is still armed: a reset tries again and dies again.
    h.engine->reset_device("operator");
    h.run_until_done();
    h.rt.run_for(std::chrono::seconds(1));
    CHECK(h.engine->device_state() == device_health::dead);
    auto refused = h.engine->submit(h.greedy("early", prompt(0), 2), std::make_shared<recording_sink>());
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == status::device_dead);

    h.engine->faults()->clear();
    const auto resets = h.engine->device_resets();
    h.engine->reset_device("operator");
    h.rt.run_until_idle();
    while (h.engine->device_state() != device_health::ready && h.rt.advance_to_next_timer()) {
    }
    REQUIRE(h.engine->device_state() == device_health::ready);
    CHECK(h.engine->device_resets() == resets + 1);
    CHECK(h.engine->health().healthy);

    auto again = std::make_shared<recording_sink>();
    REQUIRE(h.engine->submit(h.greedy("after", prompt(1), k_tokens), again).ok());
    h.run_until_done();
    REQUIRE(again->finishes == 1);
    CHECK(again->result.reason == finish_reason::length);
    CHECK(again->tokens == expected(1));
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
}

TEST_CASE("fault points: arming a point nothing in this engine consumes is unsupported", "[engine][faults]") {
    engine_harness h({"log.level=off"});
    auto refused = h.engine->faults()->arm(always(fault_point::client_stall));
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.code() == status::unsupported);
    CHECK(h.engine->faults()->list().empty());
    // Every other point has a consumer here (device points; sampler_stall, the sampler's).
    for (auto p : device::all_fault_points) {
        if (p == fault_point::client_stall) continue;
        INFO(device::to_string(p));
        CHECK(h.engine->faults()->consumed(p));
    }
}
