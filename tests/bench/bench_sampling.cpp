// Sampling micro-benchmarks over one Qwen3 logits row (151,936 BF16 = 303,872 B).
// The limit is a memcpy of the same bytes; docs/sampling.md keeps the figures.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "model/core/bf16.hpp"
#include "model/sampling/sampling.hpp"

namespace {

using namespace calserve::model;

constexpr std::size_t vocab = 151936;

// "peaked": N(0, 2) background plus a handful of strong tokens, like a confident LM step;
// "flat": N(0, 2) only, the worst case for top-p (a nucleus of tens of thousands).
const std::vector<bf16>& logits_row(bool peaked) {
    static const auto make = [](bool with_peaks) {
        std::mt19937 gen(2024);
        std::normal_distribution<float> normal(0.0f, 2.0f);
        std::vector<bf16> row(vocab);
        for (auto& x : row) x = f32_to_bf16(normal(gen));
        if (with_peaks) {
            for (int j = 0; j < 24; ++j) row[(gen() % vocab)] = f32_to_bf16(14.0f + static_cast<float>(j % 6));
        }
        return row;
    };
    static const std::vector<bf16> peaked_row = make(true);
    static const std::vector<bf16> flat_row = make(false);
    return peaked ? peaked_row : flat_row;
}

void BM_memcpy_logits(benchmark::State& state) {
    const auto& src = logits_row(true);
    std::vector<bf16> dst(vocab);
    for (auto _ : state) {
        std::memcpy(dst.data(), src.data(), vocab * sizeof(bf16));
        benchmark::DoNotOptimize(dst.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * vocab * sizeof(bf16)));
}
BENCHMARK(BM_memcpy_logits);

void BM_bf16_to_f32(benchmark::State& state) {
    const auto level = static_cast<simd_level>(state.range(0));
    const auto& src = logits_row(true);
    std::vector<float> dst(vocab);
    for (auto _ : state) {
        bf16_to_f32(src, dst, level);
        benchmark::DoNotOptimize(dst.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * vocab * sizeof(bf16)));
}
BENCHMARK(BM_bf16_to_f32)->Arg(static_cast<int>(simd_level::avx2))->Arg(static_cast<int>(simd_level::scalar));

void BM_greedy_fused(benchmark::State& state) {
    const auto level = static_cast<simd_level>(state.range(0));
    const auto& src = logits_row(true);
    for (auto _ : state) benchmark::DoNotOptimize(argmax_bf16(src, level));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * vocab * sizeof(bf16)));
}
BENCHMARK(BM_greedy_fused)->Arg(static_cast<int>(simd_level::avx2))->Arg(static_cast<int>(simd_level::scalar));

void run_sampler(benchmark::State& state, const sampling_params& sp, bool peaked, token_history history = {}) {
    const auto& src = logits_row(peaked);
    sampler smp;
    request_rng rng(9);
    for (auto _ : state) {
        auto r = smp.sample(std::span<const bf16>(src), sp, history, rng);
        if (!r.ok()) {
            state.SkipWithError(r.error().what().c_str());
            break;
        }
        benchmark::DoNotOptimize(r->token);
    }
}

void BM_greedy_sampler(benchmark::State& state) {
    sampling_params sp;
    sp.temperature = 0.0f;
    run_sampler(state, sp, true);
}
BENCHMARK(BM_greedy_sampler);

void BM_temperature(benchmark::State& state) {
    sampling_params sp;
    sp.temperature = 0.8f;
    run_sampler(state, sp, state.range(0) != 0);
}
BENCHMARK(BM_temperature)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_top_k_50(benchmark::State& state) {
    sampling_params sp;
    sp.top_k = 50;
    run_sampler(state, sp, state.range(0) != 0);
}
BENCHMARK(BM_top_k_50)->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond);

void BM_top_p_0_9(benchmark::State& state) {
    sampling_params sp;
    sp.top_p = 0.9f;
    run_sampler(state, sp, state.range(0) != 0);
}
BENCHMARK(BM_top_p_0_9)->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond);

void BM_full_with_penalties(benchmark::State& state) {
    static std::vector<std::int32_t> prompt, generated;
    std::mt19937 gen(5);
    prompt.resize(1024);
    generated.resize(256);
    for (auto& t : prompt) t = static_cast<std::int32_t>(gen() % vocab);
    for (auto& t : generated) t = static_cast<std::int32_t>(gen() % 2000);
    sampling_params sp;
    sp.temperature = 0.7f;
    sp.top_k = 40;
    sp.top_p = 0.95f;
    sp.min_p = 0.02f;
    sp.repetition_penalty = 1.1f;
    sp.frequency_penalty = 0.3f;
    sp.presence_penalty = 0.2f;
    for (int j = 0; j < 10; ++j) sp.logit_bias.emplace_back(static_cast<std::int32_t>(j * 997), j % 2 ? 5.0f : -100.0f);
    sp.logprobs = true;
    sp.top_logprobs = 5;
    if (state.range(0) == 0) sp.top_k = 0;  // dense variant: top-p over the whole vocabulary
    run_sampler(state, sp, true, {prompt, generated});
}
BENCHMARK(BM_full_with_penalties)->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond);

}  // namespace
