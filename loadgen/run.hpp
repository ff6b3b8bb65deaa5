#pragma once
//! Load generation of `calserve bench`: prompts of exact token counts cut from
//! real text (tokenized locally, or by a server's /tokenize when asked), arrival schedules (open-loop Poisson or
//! constant rate, closed-loop concurrency), and the run that records every request.
//!
//! Fault model: an unreachable server or a failed /tokenize is an error before any
//! load is sent; failures during the run are recorded per request, never abort the
//! run. Invariants: the workload is a function of the options and the seed; warm-up
//! requests come first in the schedule and are marked, never counted.
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "loadgen/client.hpp"
#include "loadgen/report.hpp"

namespace calserve::loadgen {

enum class arrival_kind { poisson, constant, closed };

struct run_options {
    std::string model;              // empty: the server's first model
    arrival_kind arrival = arrival_kind::closed;
    double rate = 1.0;              // requests / s (open loop)
    int concurrency = 1;            // closed loop
    int requests = 30;              // measured
    int warmup = 10;
    std::int64_t prompt_tokens = 16;
    std::int64_t output_tokens = 32;
    std::int64_t context = 0;       // 0: from /v1/models
    std::uint64_t seed = 1;
    std::chrono::milliseconds timeout{600000};
    std::string response_format;    // JSON object text for every request's `response_format`; empty = none
    // Sampling temperature of every request (0: greedy). Above 0 each request carries
    // a seed derived from `seed` and its position in the run, so both servers of
    // --compare draw alike for the same prompt.
    double temperature = 0.0;
    // Prefix-reuse workloads: `turns` > 1 makes each group of `turns` requests one
    // conversation whose turn t re-sends the first t x prompt_tokens tokens of its
    // history (run in order by one client); `shared_prefix` tokens, the same for every
    // request, go before each prompt (a shared system prompt).
    int turns = 1;
    std::int64_t shared_prefix = 0;
    slo objectives;
};

// The prompt-length buckets of the harness (tokens).
const std::vector<std::int64_t>& prompt_buckets();
// Parses "256", "1K", "32k" (K = 1024).
std::optional<std::int64_t> parse_token_count(std::string_view text);
// Caps a prompt length so prompt + output fits `context` (0: no cap); at least 1.
std::int64_t cap_prompt(std::int64_t prompt, std::int64_t output, std::int64_t context);

// Start offsets (s) of `n` arrivals at `rate` per second; closed loop gives all zero.
std::vector<double> arrival_times(std::size_t n, double rate, arrival_kind kind, std::uint64_t seed);

// `count` prompts of exactly `tokens` ids, windows of `corpus` at seeded offsets
// (wrapping), so consecutive prompts differ (no prefix-cache flattery).
std::vector<std::vector<std::int64_t>> cut_prompts(const std::vector<std::int64_t>& corpus, std::int64_t tokens,
                                                   std::size_t count, std::uint64_t seed);

// The prompts of a prefix-reuse workload (see run_options::turns, shared_prefix):
// `count` prompts; with turns > 1, prompt i is turn i % turns + 1 of conversation
// i / turns. Without either option this is cut_prompts.
std::vector<std::vector<std::int64_t>> workload_prompts(const std::vector<std::int64_t>& corpus,
                                                        const run_options& opt, std::size_t count);

// Built-in English prose used when no --corpus file is given.
std::string default_corpus_text();

// Text -> token ids, without special tokens: a local tokenizer or a server's /tokenize.
using encoder = std::function<result<std::vector<std::int64_t>>(const std::string& text)>;
encoder remote_encoder(const endpoint& ep, std::chrono::milliseconds timeout);

// Tokenizes `text`, repeating it until at least `min_tokens` ids.
result<std::vector<std::int64_t>> corpus_tokens(const encoder& encode, const std::string& text,
                                                std::int64_t min_tokens);

struct progress {
    std::atomic<int> done{0};
    std::atomic<int> in_flight{0};
    std::atomic<int> failed{0};
    int total = 0;
};

// Runs warm-up + measured requests against one server. `origin` is the shared
// clock zero (so two servers' records live on one time axis in --compare).
std::vector<request_record> run_load(const endpoint& ep, const std::string& label, const run_options& opt,
                                     const std::vector<std::vector<std::int64_t>>& prompts, int warmup,
                                     int measured, bench_clock::time_point origin, progress& prog);

}  // namespace calserve::loadgen
