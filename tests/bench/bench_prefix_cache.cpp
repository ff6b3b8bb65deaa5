// Host cost of the prefix cache per request: the lookup a reservation makes (keys of
// every whole block of the prompt, the longest match, the token comparison of a hit)
// and the insert at release, for prompts up to 32k tokens in 64-token blocks, against
// a cache already holding 64 other conversations.
#include <benchmark/benchmark.h>

#include <chrono>
#include <numeric>
#include <random>
#include <vector>

#include "actors/prefix_cache.hpp"

namespace {
using namespace calserve::actors;

std::vector<prefix_cache::token> random_run(std::size_t n, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<prefix_cache::token> t(n);
    for (auto& x : t) x = std::int32_t(rng() % 151936);
    return t;
}

// As the KvManager sizes it: a pool of 1M tokens (16,384 blocks of 64).
constexpr std::size_t k_index_room = 16384;

void populate(prefix_cache& c, std::size_t n) {
    c.reserve(k_index_room);
    for (sequence_id s = 1; s <= 64; ++s) c.insert(1000 + s, cache_scope("pkg", ""), random_run(n, std::uint32_t(s)));
}

// A hit: the prompt extends a cached conversation by one turn of 256 tokens.
void BM_prefix_cache_lookup_hit(benchmark::State& state) {
    const auto n = std::size_t(state.range(0));
    prefix_cache c(64);
    populate(c, 1024);
    auto history = random_run(n, 7);
    c.insert(1, cache_scope("pkg", ""), history);
    history.resize(n + 256, 5);
    const auto scope = cache_scope("pkg", "");
    std::int64_t hit = 0;
    for (auto _ : state) {
        auto h = c.lookup(scope, history, std::int64_t(history.size()) - 1);
        hit = h ? h->tokens : 0;
        benchmark::DoNotOptimize(hit);
    }
    state.counters["hit_tokens"] = double(hit);
}
BENCHMARK(BM_prefix_cache_lookup_hit)->Arg(1024)->Arg(8192)->Arg(32768)->Unit(benchmark::kMicrosecond);

// A miss: nothing shares the prompt (every block's key is computed and looked up).
void BM_prefix_cache_lookup_miss(benchmark::State& state) {
    const auto n = std::size_t(state.range(0));
    prefix_cache c(64);
    populate(c, 1024);
    const auto prompt = random_run(n, 99);
    const auto scope = cache_scope("pkg", "");
    for (auto _ : state) benchmark::DoNotOptimize(c.lookup(scope, prompt, std::int64_t(n) - 1));
}
BENCHMARK(BM_prefix_cache_lookup_miss)->Arg(1024)->Arg(32768)->Unit(benchmark::kMicrosecond);

// The insert at release, then its removal (so every iteration inserts into the same cache).
void BM_prefix_cache_insert(benchmark::State& state) {
    const auto n = std::size_t(state.range(0));
    prefix_cache c(64);
    populate(c, 1024);
    const auto tokens = random_run(n, 11);
    const auto scope = cache_scope("pkg", "");
    for (auto _ : state) {
        benchmark::DoNotOptimize(c.insert(1, scope, tokens));
        c.erase(1);
    }
}
BENCHMARK(BM_prefix_cache_insert)->Arg(1024)->Arg(32768)->Unit(benchmark::kMicrosecond);

}  // namespace

namespace {
// What one request costs the cache, as the KvManager pays it, in seconds: the lookup at its
// grant, the share of its prompt once prefilled (a running entry, reusing what the lookup
// found) and the promotion at release with `all` (the prompt and its generated tokens).
// The BatchTick's two token copies are counted: the prompt it sends to be looked up (and
// sends again to be shared) and the tokens it releases. The index keeps those vectors; it
// copies nothing itself. Clocked by hand (UseManualTime): restoring the cache between
// iterations is not timed, and PauseTiming/ResumeTiming read the process's CPU clock and
// cost microseconds themselves (the CPU column still shows them).
double one_request(prefix_cache& c, const cache_key& scope, const std::vector<prefix_cache::token>& prompt,
                   const std::vector<prefix_cache::token>& all, prefix_cache::lookup_trace& trace) {
    const auto start = std::chrono::steady_clock::now();
    auto shared = std::make_shared<const std::vector<prefix_cache::token>>(prompt);
    benchmark::DoNotOptimize(c.lookup(scope, shared, std::int64_t(prompt.size()) - 1, trace));
    benchmark::DoNotOptimize(c.insert(2, scope, shared, shared->size(), /*running=*/true, &trace));
    auto released = std::make_shared<const std::vector<prefix_cache::token>>(all);
    benchmark::DoNotOptimize(c.insert(2, scope, released, released->size()));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A turn of a cached conversation: history + 256 new tokens, 64 generated; the history's
// entry becomes redundant at the share.
void BM_prefix_cache_request(benchmark::State& state) {
    const auto n = std::size_t(state.range(0));
    prefix_cache c(64);
    populate(c, 1024);
    const auto scope = cache_scope("pkg", "");
    auto history = random_run(n, 7);
    auto prompt = history;
    prompt.resize(n + 256, 5);
    auto all = prompt;
    all.resize(prompt.size() + 64, 6);
    prefix_cache::lookup_trace trace;
    c.insert(1, scope, history);
    for (auto _ : state) {
        state.SetIterationTime(one_request(c, scope, prompt, all, trace));
        c.erase(2);
        c.insert(1, scope, history);
    }
    state.counters["compared_tokens"] = benchmark::Counter(double(c.compared_tokens()), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_prefix_cache_request)->Arg(1024)->Arg(8192)->Arg(32768)->UseManualTime()->Unit(benchmark::kMicrosecond);

// A conversation's first request (nothing cached shares its prompt): the lookup misses at
// block 0, the share hashes and indexes every block of the prompt.
void BM_prefix_cache_request_cold(benchmark::State& state) {
    const auto n = std::size_t(state.range(0));
    prefix_cache c(64);
    populate(c, 1024);
    const auto scope = cache_scope("pkg", "");
    auto prompt = random_run(n, 7);
    auto all = prompt;
    all.resize(prompt.size() + 64, 6);
    prefix_cache::lookup_trace trace;
    for (auto _ : state) {
        state.SetIterationTime(one_request(c, scope, prompt, all, trace));
        c.erase(2);
    }
}
BENCHMARK(BM_prefix_cache_request_cold)->Arg(1024)->Arg(32768)->UseManualTime()->Unit(benchmark::kMicrosecond);
}  // namespace
