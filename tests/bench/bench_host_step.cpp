// Host work of one B16 decode step, the part of a step the device cannot hide:
// the BatchTick's plan over 32 admitted sequences, sampling 16 rows of 151,936
// BF16 logits (the Sampler actor's sample_batch with runtime.sampler_threads=2),
// the NaN/Inf check of those logits, and streaming each row's token (stream decoder, stop matcher, the OpenAI SSE
// chunk). Issue bar: < 1 ms per step. Greedy and top-p (T 0.8, p 0.95) rows.
// With the decode programs' sampling head (BM_host_step_b16_head_*): no logits reach
// the host; the step's host work is the plan, the head's parameters of the next step,
// reading 16 drawn tokens and RNG states, applying them to the rows, the Sampler's pass
// (nothing left to draw) and the streaming. Issue bar: <= 0.1 ms per step.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <fstream>
#include <random>
#include <vector>

#include "actors/chip_session_actor.hpp"
#include "actors/device_actor.hpp"
#include "actors/job_codec.hpp"
#include "actors/sampler_actor.hpp"
#include "actors/schedule_policy.hpp"
#include "model/core/bf16.hpp"
#include "model/core/thread_pool.hpp"
#include "model/chat/stop_matcher.hpp"
#include "model/tokenizer/stream_decoder.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "net/api_params.hpp"
#include "net/openai_format.hpp"

namespace {

namespace fs = std::filesystem;
using namespace calserve;
using namespace calserve::actors;

constexpr std::size_t k_vocab = 151936;
constexpr std::size_t k_rows = 16;

fs::path tokenizer_dir() {
    if (const char* env = std::getenv("CALSERVE_TOKENIZER_DIR")) return env;
    std::error_code ec;
    fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
    for (; !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
        std::ifstream cache(dir / "CMakeCache.txt");
        std::string line;
        while (std::getline(cache, line))
            if (line.rfind("CMAKE_HOME_DIRECTORY:INTERNAL=", 0) == 0)
                return fs::path(line.substr(line.find('=') + 1)) / ".cache" / "tokenizer-qwen3";
    }
    return {};
}

struct step_fixture {
    std::shared_ptr<const model::tokenizer> tok;
    job_context job;
    std::vector<seq_view> views;
    std::vector<model::stream_decoder> decoders;
    std::vector<model::stop_matcher> matchers;
    std::vector<std::unique_ptr<net::response_builder>> builders;

    explicit step_fixture(bool greedy) {
        auto loaded = model::tokenizer::load(tokenizer_dir());
        if (loaded) tok = loaded.value();
        std::mt19937 gen(11);
        std::normal_distribution<float> normal(0.0f, 2.0f);
        job.vocab = std::int64_t(k_vocab);
        std::vector<model::bf16> logits(k_rows * k_vocab);
        for (auto& x : logits) x = model::f32_to_bf16(normal(gen));
        for (std::size_t r = 0; r < k_rows; ++r)
            for (int j = 0; j < 8; ++j) logits[r * k_vocab + gen() % 30000] = model::f32_to_bf16(12.0f + float(j));
        job.logits.resize(logits.size() * sizeof(model::bf16));
        std::memcpy(job.logits.data(), logits.data(), job.logits.size());
        for (std::size_t r = 0; r < k_rows; ++r) {
            auto seq = std::make_shared<sequence_state>();
            seq->seq = r + 1;
            seq->tokens = {9707, 11, 1879};
            seq->prompt_len = 3;
            if (!greedy) {
                seq->params.temperature = 0.8f;
                seq->params.top_p = 0.95f;
            } else {
                seq->params.temperature = 0;
            }
            seq->rng = model::request_rng(r + 1);
            job.rows.push_back(seq);
        }
        for (std::size_t i = 0; i < 2 * k_rows; ++i)
            views.push_back({i + 1, false, i < k_rows, {}, std::chrono::microseconds(i), int(i % 2), false});
        for (std::size_t r = 0; r < k_rows && tok; ++r) {
            decoders.emplace_back(tok);
            matchers.emplace_back(std::vector<std::string>{"\n\n"});
            builders.push_back(std::make_unique<net::response_builder>(
                net::api_kind::completion, "cmpl-bench", "bench", false, job.rows[r]->params,
                [](token_id) { return std::string(); }));
        }
    }
};

void host_step(benchmark::State& state, bool greedy) {
    step_fixture f(greedy);
    if (!f.tok) {
        state.SkipWithError("no tokenizer (set CALSERVE_TOKENIZER_DIR)");
        return;
    }
    model::thread_pool pool(2);
    std::vector<model::sampler> samplers(2);
    schedule_params params;
    params.max_batch = 16;
    std::size_t bytes = 0;
    for (auto _ : state) {
        auto plan = plan_next_job(f.views, {}, params, std::chrono::milliseconds(1), slot_view{0, true});
        benchmark::DoNotOptimize(plan);
        auto finite = check_logits_rows(f.job.logits, k_rows, &pool);  // the DeviceActor's check after D2H
        benchmark::DoNotOptimize(finite);
        sample_batch(f.job, samplers, &pool);
        for (std::size_t r = 0; r < k_rows; ++r) {
            auto& seq = *f.job.rows[r];
            const token_id t = seq.tokens.back();
            auto flushed = f.matchers[r].push(f.decoders[r].push(t));
            bytes += f.builders[r]->token_chunk(generated_token{t, std::move(flushed.released), 0, {}}).size();
            seq.tokens.resize(std::size_t(seq.prompt_len));  // keep the history short and constant
        }
    }
    benchmark::DoNotOptimize(bytes);
    state.SetItemsProcessed(std::int64_t(state.iterations() * k_rows));
}

void host_step_head(benchmark::State& state, bool greedy) {
    step_fixture f(greedy);
    if (!f.tok) {
        state.SkipWithError("no tokenizer (set CALSERVE_TOKENIZER_DIR)");
        return;
    }
    model::thread_pool pool(2);
    std::vector<model::sampler> samplers(2);
    schedule_params params;
    params.max_batch = 16;
    f.job.head.assign(k_rows, device::head_mode::sample);
    f.job.logits.clear();  // the head returns no logits
    // The head's outputs as the device returns them: a token and an RNG state per row.
    std::vector<std::int32_t> drawn(k_rows);
    std::vector<std::uint64_t> states(k_rows * 4);
    std::mt19937 gen(5);
    for (auto& t : drawn) t = std::int32_t(gen() % 30000);
    for (auto& s : states) s = gen() | 1;
    std::vector<device::head_row> head(k_rows);
    std::size_t bytes = 0;
    for (auto _ : state) {
        auto plan = plan_next_job(f.views, {}, params, std::chrono::milliseconds(1), slot_view{0, true});
        benchmark::DoNotOptimize(plan);
        head_params_of(f.job, head);  // the next step's sample_params (H2D)
        benchmark::DoNotOptimize(head.data());
        auto read = take_draws(f.job, std::as_bytes(std::span(drawn)), std::as_bytes(std::span(states)));
        benchmark::DoNotOptimize(read);
        apply_draws(f.job);
        sample_batch(f.job, samplers, &pool);  // every row drawn: nothing to sample
        for (std::size_t r = 0; r < k_rows; ++r) {
            auto& seq = *f.job.rows[r];
            const token_id t = seq.tokens.back();
            auto flushed = f.matchers[r].push(f.decoders[r].push(t));
            bytes += f.builders[r]->token_chunk(generated_token{t, std::move(flushed.released), 0, {}}).size();
            seq.tokens.resize(std::size_t(seq.prompt_len));
        }
    }
    benchmark::DoNotOptimize(bytes);
    state.SetItemsProcessed(std::int64_t(state.iterations() * k_rows));
}

void BM_host_step_b16_head_greedy(benchmark::State& state) { host_step_head(state, true); }
void BM_host_step_b16_head_top_p(benchmark::State& state) { host_step_head(state, false); }
BENCHMARK(BM_host_step_b16_head_greedy)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_host_step_b16_head_top_p)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_host_step_b16_greedy(benchmark::State& state) { host_step(state, true); }
void BM_host_step_b16_top_p(benchmark::State& state) { host_step(state, false); }
BENCHMARK(BM_host_step_b16_greedy)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_host_step_b16_top_p)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
