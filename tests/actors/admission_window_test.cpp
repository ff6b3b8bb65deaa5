// The admission window (runtime.admit_window_us) on the threaded runtime, where the clock
// moves while a handler runs. The BatchTick plans a step and, when the window holds it,
// arms a timer for the window's end. Planning and the timer once read the clock twice: a
// window that closed between the two readings held the step and armed no timer, and with
// nothing else to come (the other rows ready, their Requests' answers only counted) the
// running requests waited until their deadlines (the stall seen once after a generation
// switch under streaming load, on a loaded machine). A 1 us window makes that edge common.
// No timed assertion: the wait below only bounds a hang; the check is that every request
// ends by length and the scheduler never went idle with nothing to wake it.
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "actors/batch_tick_actor.hpp"
#include "actors/device_actor.hpp"
#include "tests/actors/engine_fixture.hpp"

using namespace calserve;
using namespace calserve::actors;
using calserve::test::engine_harness;
using calserve::test::recording_sink;

namespace {

// Polls until `done` or a wall-clock bound (a hang fails the checks that follow).
template <class F>
bool wait_for(F done, std::chrono::seconds bound) {
    const auto until = std::chrono::steady_clock::now() + bound;
    while (!done()) {
        if (std::chrono::steady_clock::now() > until) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
}

int finished(std::vector<std::shared_ptr<recording_sink>>& sinks) {
    int n = 0;
    for (auto& s : sinks) {
        std::lock_guard lock(s->mutex);
        n += s->finishes;
    }
    return n;
}

}  // namespace

TEST_CASE("admission window: a window that closes while the BatchTick plans still wakes it (threaded runtime)",
          "[engine][window][liveness]") {
    engine_harness h({"log.level=off", "runtime.admit_window_us=1", "runtime.max_batch=4"}, run_mode::threaded);
    REQUIRE(wait_for([&] { return h.engine->device_state() == device_health::ready; }, std::chrono::seconds(60)));
    const auto prompt = calserve::test::random_prompt(902, 6);
    // Streams of different lengths: each one that ends leaves the others ready, and the
    // window holds their next step.
    for (int round = 0; round < 25; ++round) {
        std::vector<std::shared_ptr<recording_sink>> sinks;
        for (int i = 0; i < 4; ++i) {
            sinks.push_back(std::make_shared<recording_sink>());
            auto r = h.greedy("w" + std::to_string(round) + "-" + std::to_string(i), prompt, 2 + 2 * i);
            r.timeout = std::chrono::seconds(20);
            REQUIRE(h.engine->submit(std::move(r), sinks.back()).ok());
        }
        INFO("round " << round);
        REQUIRE(wait_for([&] { return finished(sinks) == 4; }, std::chrono::seconds(60)));
        for (auto& s : sinks) CHECK(s->result.reason == finish_reason::length);
        for (const auto& f : h.rt.failures()) UNSCOPED_INFO(f);
        REQUIRE(h.rt.failures().empty());
    }
    CHECK(h.metrics.scheduler_stalls.value() == 0);
}
