#include "tests/actors/engine_fixture.hpp"

#include "actors/batch_tick_actor.hpp"

#include <catch2/catch.hpp>

#include "actors/device_actor.hpp"
#include "tests/support/test_paths.hpp"

namespace calserve::test {

engine_harness::engine_harness(std::vector<std::string> overrides, actors::run_mode mode, const std::string& preset)
    : rt(mode, 2) {
    engine::engine_setup setup;
    setup.model_dir = tiny_model_dir(preset);
    open(overrides, std::move(setup), mode);
}

engine_harness::engine_harness(on_package_t, std::vector<std::string> overrides, const std::string& package_preset)
    : rt(actors::run_mode::deterministic, 2) {
    engine::engine_setup setup;
    setup.package_dir = test_package_dir(package_preset);
    open(overrides, std::move(setup), actors::run_mode::deterministic);
}

void engine_harness::open(const std::vector<std::string>& overrides, engine::engine_setup setup, actors::run_mode mode) {
    // The cpu backend computes as the greedy references do (fp32) unless a test says otherwise.
    std::vector<std::string> all{"device.cpu_arithmetic=fp32"};
    all.insert(all.end(), overrides.begin(), overrides.end());
    auto cfg = config::load(std::nullopt, all);
    REQUIRE(cfg.ok());
    setup.metrics = &metrics;
    auto e = engine::serving_engine::create(rt, *cfg, setup);
    if (!e) FAIL("engine: " << e.error().what());
    engine = std::move(e.value());
    if (mode == actors::run_mode::deterministic) {
        rt.run_until_idle();
        while (engine->device_state() != actors::device_health::ready && rt.advance_to_next_timer()) {
        }
        REQUIRE(engine->device_state() == actors::device_health::ready);
    } else {
        rt.start();
    }
}

engine_harness::~engine_harness() {
    rt.stop();
    engine.reset();
}

void engine_harness::run_until_done(double limit_s) {
    auto limit = rt.now() + std::chrono::nanoseconds(std::int64_t(limit_s * 1e9));
    rt.run_until_idle();
    // Also until the scheduler holds no sequence: a chained step past a request's end
    // (token chaining) still holds its row's KV until the device returns it.
    while ((engine->in_flight() > 0 || engine->batch_tick().sequences() > 0) && rt.now() < limit &&
           rt.advance_to_next_timer()) {
    }
    rt.run_until_idle();
}

actors::generation_request engine_harness::greedy(std::string id, std::vector<actors::token_id> prompt,
                                                  std::int64_t max_tokens) {
    actors::generation_request r;
    r.id = std::move(id);
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    return r;
}

}  // namespace calserve::test
