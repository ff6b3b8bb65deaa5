// Model-backed helpers shared by the engine and end-to-end tests.
#include "tests/support/model_support.hpp"

#include <catch2/catch.hpp>
#include <map>
#include <mutex>
#include <random>

#include "device/package_spec.hpp"
#include "io/atomic_dir.hpp"
#include "model/core/bf16.hpp"
#include "model/package/pack.hpp"
#include "model/weights/synthetic_model.hpp"
#include "model/cpu/transformer.hpp"
#include "tests/support/test_paths.hpp"

namespace calserve::test {

const std::filesystem::path& tiny_model_dir(const std::string& preset) {
    static std::mutex mutex;
    static std::map<std::string, std::filesystem::path> dirs;
    std::lock_guard lock(mutex);
    auto& dir = dirs[preset];
    if (dir.empty()) {
        dir = binary_dir() / "test-models" / preset;
        if (!std::filesystem::exists(tokenizer_dir() / "tokenizer.json"))
            FAIL("Qwen3 tokenizer missing at " << tokenizer_dir() << ": run tools/bootstrap");
        // Test processes run in parallel (ctest -j): the directory appears whole or not at all.
        auto made = io::build_directory_atomically(
            dir, [](const std::filesystem::path& d) { return std::filesystem::exists(d / "tokenizer.json"); },
            [&](const std::filesystem::path& d) { return model::make_synthetic_model(preset, d, 7, "f32", tokenizer_dir()); });
        if (!made) FAIL("make_synthetic_model: " << made.error().what());
    }
    return dir;
}

const std::filesystem::path& test_package_dir(const std::string& preset) { return test_package_dir(preset, 1); }

const std::filesystem::path& test_package_dir(const std::string& preset, std::uint64_t seed) {
    static std::mutex mutex;
    static std::map<std::pair<std::string, std::uint64_t>, std::filesystem::path> dirs;
    std::lock_guard lock(mutex);
    auto& dir = dirs[{preset, seed}];
    if (dir.empty()) {
        dir = binary_dir() / "test-packages" / (seed == 1 ? preset : preset + "-seed" + std::to_string(seed));
        if (!std::filesystem::exists(tokenizer_dir() / "tokenizer.json"))
            FAIL("Qwen3 tokenizer missing at " << tokenizer_dir() << ": run tools/bootstrap");
        auto made = io::build_directory_atomically(
            dir, [&](const std::filesystem::path& d) { return model::package::pack_is_current(d, preset); },
            [&](const std::filesystem::path& d) -> void_result {
                model::package::pack_options o;
                o.preset = preset;
                o.seed = seed;
                o.out = d;
                o.tokenizer_dir = tokenizer_dir();
                if (auto r = model::package::pack(o); !r) return r.error();
                return {};
            });
        if (!made) FAIL("pack " << preset << ": " << made.error().what());
    }
    return dir;
}

std::filesystem::path package_model_dir(const std::filesystem::path& package_dir) {
    auto spec = device::package_spec_from_dir(package_dir);
    REQUIRE(spec.ok());
    return spec->reference_model_dir;
}

std::vector<std::int32_t> random_prompt(int seed, int length) {
    std::mt19937 rng(seed);
    std::vector<std::int32_t> p;
    for (int i = 0; i < length; ++i) p.push_back(std::int32_t(rng() % 150000));
    return p;
}

std::vector<std::int32_t> reference_greedy(const std::filesystem::path& model_dir,
                                               const std::vector<std::int32_t>& prompt, std::int64_t max_tokens) {
    return reference_greedy(model_dir, prompt, max_tokens, model::arithmetic::fp32);
}

std::vector<std::int32_t> reference_greedy(const std::filesystem::path& model_dir,
                                               const std::vector<std::int32_t>& prompt, std::int64_t max_tokens,
                                               model::arithmetic arith) {
    // One loaded model per directory and mode for the whole test binary; sequence ids keep runs apart.
    static std::mutex mutex;
    static std::map<std::pair<std::filesystem::path, int>, std::unique_ptr<model::causal_lm>> models;
    static model::seq_id next_seq = 1;
    std::lock_guard lock(mutex);
    auto& slot = models[{model_dir, int(arith)}];
    if (!slot) {
        model::load_options opts;
        opts.arith = arith;
        auto lm = model::load_causal_lm(model_dir, opts);
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
        return std::int32_t(best);
    };
    REQUIRE(m.prefill(seq, prompt, logits).ok());
    std::vector<std::int32_t> out;
    for (std::int64_t i = 0; i < max_tokens; ++i) {
        out.push_back(argmax_bf16());
        if (i + 1 < max_tokens) REQUIRE(m.decode(seq, out.back(), logits).ok());
    }
    m.free_sequence(seq);
    return out;
}

}  // namespace calserve::test
