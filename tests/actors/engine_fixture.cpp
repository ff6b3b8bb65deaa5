#include "tests/actors/engine_fixture.hpp"

#include <catch2/catch.hpp>

#include "actors/device_actor.hpp"
#include "model/bf16.hpp"
#include "model/synthetic_model.hpp"
#include "model/transformer.hpp"
#include "tests/support/test_paths.hpp"

namespace calserve::test {

const std::filesystem::path& tiny_model_dir(const std::string& preset) {
    static std::mutex mutex;
    static std::map<std::string, std::filesystem::path> dirs;
    std::lock_guard lock(mutex);
    auto& dir = dirs[preset];
    if (dir.empty()) {
        dir = binary_dir() / "test-models" / preset;
        if (!std::filesystem::exists(dir / "config.json")) {
            std::filesystem::create_directories(dir);
            auto made = model::make_synthetic_model(preset, dir, 7, "f32", tokenizer_dir());
            if (!made) FAIL("make_synthetic_model: " << made.error().what());
        }
    }
    return dir;
}

engine_harness::engine_harness(std::vector<std::string> overrides, actors::run_mode mode, const std::string& preset)
    : rt(mode, 2) {
    auto cfg = config::load(std::nullopt, overrides);
    REQUIRE(cfg.ok());
    actors::engine_setup setup;
    setup.model_dir = tiny_model_dir(preset);
    setup.metrics = &metrics;
    auto e = actors::serving_engine::create(rt, *cfg, setup);
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
    while (engine->in_flight() > 0 && rt.now() < limit && rt.advance_to_next_timer()) {
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

std::vector<actors::token_id> reference_greedy(const std::filesystem::path& model_dir,
                                               const std::vector<actors::token_id>& prompt, std::int64_t max_tokens) {
    // One loaded model per directory for the whole test binary; sequence ids keep runs apart.
    static std::mutex mutex;
    static std::map<std::filesystem::path, std::unique_ptr<model::causal_lm>> models;
    static model::seq_id next_seq = 1;
    std::lock_guard lock(mutex);
    auto& slot = models[model_dir];
    if (!slot) {
        auto lm = model::load_causal_lm(model_dir, {});
        REQUIRE(lm.ok());
        slot = std::move(lm.value());
    }
    auto& m = *slot;
    const model::seq_id seq = next_seq++;
    std::vector<float> logits(std::size_t(m.shape().vocab_size));
    // The device returns BF16 logits: take the argmax the same way.
    auto argmax_bf16 = [&] {
        std::size_t best = 0;
        float best_v = -1e30f;
        for (std::size_t i = 0; i < logits.size(); ++i) {
            float v = model::bf16_to_f32(model::f32_to_bf16(logits[i]));
            if (v > best_v) {
                best_v = v;
                best = i;
            }
        }
        return actors::token_id(best);
    };
    REQUIRE(m.prefill(seq, prompt, logits).ok());
    std::vector<actors::token_id> out;
    for (std::int64_t i = 0; i < max_tokens; ++i) {
        out.push_back(argmax_bf16());
        if (i + 1 < max_tokens) REQUIRE(m.decode(seq, out.back(), logits).ok());
    }
    m.free_sequence(seq);
    return out;
}

}  // namespace calserve::test
