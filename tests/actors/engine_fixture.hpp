#pragma once
// Shared fixture for serving-engine tests: a synthetic model directory (cpu
// backend) or package (sim backend) built once per test binary, a
// deterministic runtime, and a recording generation sink.
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "metrics/metrics.hpp"
#include "actors/runtime/runtime.hpp"
#include "engine/serving_engine.hpp"
#include "config/config.hpp"
#include "tests/support/model_support.hpp"

namespace calserve::test {

struct recording_sink : actors::generation_sink {
    std::mutex mutex;
    std::vector<actors::token_id> tokens;
    std::string text;
    int finishes = 0;
    actors::generation_result result;
    void on_token(const actors::generated_token& t) override {
        std::lock_guard lock(mutex);
        tokens.push_back(t.token);
        text += t.text;
    }
    void on_finish(const actors::generation_result& r) override {
        std::lock_guard lock(mutex);
        ++finishes;
        result = r;
        text += r.tail_text;
    }
};

// Selects the sim backend: a calbin package on the simulated NPU with its
// latency model (virtual time advances as the device would).
struct on_package_t {
    explicit on_package_t() = default;
};
inline constexpr on_package_t on_package{};

struct engine_harness {
    explicit engine_harness(std::vector<std::string> overrides = {}, actors::run_mode mode = actors::run_mode::deterministic,
                            const std::string& preset = "tiny-dense");
    engine_harness(on_package_t, std::vector<std::string> overrides, const std::string& package_preset = "tiny-dense-1chip");
    ~engine_harness();
    // Runs virtual time until every submitted request finished (or `limit` virtual seconds pass).
    void run_until_done(double limit_s = 600);
    actors::generation_request greedy(std::string id, std::vector<actors::token_id> prompt, std::int64_t max_tokens);

    metrics::registry registry;
    calserve::metrics::calserve_metrics metrics{registry};
    actors::runtime rt;
    std::unique_ptr<engine::serving_engine> engine;

private:
    void open(const std::vector<std::string>& overrides, engine::engine_setup setup, actors::run_mode mode);
};

// `cfg` with a KV cap that makes eight long sequences preempt one another: 12 blocks of
// 16 tokens (192 tokens for all of them).
inline std::vector<std::string> with_small_kv(std::vector<std::string> cfg) {
    cfg.push_back("runtime.kv_blocks=12");
    cfg.push_back("runtime.kv_step_tokens=16");
    cfg.push_back("device.sim.kv_block_tokens=16");
    return cfg;
}

}  // namespace calserve::test
