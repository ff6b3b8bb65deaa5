#pragma once
//! Prometheus metrics: a small thread-safe registry and the daemon's metric
//! families, declared once in `calserve_metrics`.
//!
//! Role: actors and net/ record; net/ renders the registry as Prometheus text
//! exposition format 0.0.4 at GET /metrics (docs/metrics.md lists every family).
//!
//! Fault model: recording never fails and never blocks on I/O. The recording path
//! is lock-free (relaxed atomics on pre-created series); only the first use of a
//! new label value takes a mutex to create its series. Rendering takes the same
//! mutex, so a series is never rendered half-built.
//!
//! Invariants: a family has one name, one type and a fixed label-name list; a
//! label-value tuple identifies at most one series (no duplicates); histogram
//! bucket bounds are strictly increasing and finite, +Inf is implicit; rendered
//! `_count` equals the +Inf bucket (both come from the same bucket counters).
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "device/health.hpp"

namespace calserve::metrics {

enum class metric_type : std::uint8_t { counter, gauge, histogram };

class counter {
public:
    void inc(double v = 1.0);     // v >= 0 (negative increments are ignored)
    double value() const { return value_.load(std::memory_order_relaxed); }

private:
    std::atomic<double> value_{0.0};
};

class gauge {
public:
    void set(double v) { value_.store(v, std::memory_order_relaxed); }
    void add(double v);
    void inc() { add(1.0); }
    void dec() { add(-1.0); }
    double value() const { return value_.load(std::memory_order_relaxed); }

private:
    std::atomic<double> value_{0.0};
};

class histogram {
public:
    explicit histogram(std::span<const double> bounds);
    void observe(double v);
    std::span<const double> bounds() const { return bounds_; }
    // Non-cumulative count of bucket i (i == bounds().size() is the overflow bucket).
    std::uint64_t bucket_count(std::size_t i) const { return counts_[i].load(std::memory_order_relaxed); }
    std::uint64_t count() const;
    double sum() const { return sum_.load(std::memory_order_relaxed); }

private:
    std::vector<double> bounds_;
    std::unique_ptr<std::atomic<std::uint64_t>[]> counts_;  // bounds_.size() + 1 entries
    std::atomic<double> sum_{0.0};
};

// Fixed bucket sets (seconds).
std::span<const double> latency_buckets();   // 0.5 ms .. 60 s
std::span<const double> fast_buckets();      // 10 us .. 1 s, for per-phase times

class family_base;

// A family: one metric name and type, many series told apart by label values.
template <class Metric>
class family {
public:
    family(family_base* base) : base_(base) {}
    // The series for these label values (created on first use; same order as the
    // family's label names). The reference stays valid as long as the registry.
    Metric& labels(std::initializer_list<std::string_view> values);
    // The unlabelled series (for families without labels).
    Metric& get() { return labels({}); }

private:
    family_base* base_;
};

class registry {
public:
    registry();
    ~registry();
    registry(const registry&) = delete;
    registry& operator=(const registry&) = delete;

    // Names must match [a-zA-Z_:][a-zA-Z0-9_:]*, be unique, and counters must end in _total.
    // A misuse is a programming error and throws std::invalid_argument at start-up.
    family<counter> add_counter(std::string name, std::string help, std::vector<std::string> label_names = {});
    family<gauge> add_gauge(std::string name, std::string help, std::vector<std::string> label_names = {});
    family<histogram> add_histogram(std::string name, std::string help, std::span<const double> bounds,
                                    std::vector<std::string> label_names = {});

    // A collector refreshes metrics that mirror state outside the process's own
    // recording (e.g. /proc/self): render() calls every collector first, outside
    // the registry lock, so it may set gauges and counters of this registry.
    void add_collector(std::function<void()> refresh);

    // Text exposition format 0.0.4 (Content-Type: text/plain; version=0.0.4).
    std::string render() const;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

// The phases of one decode step (and of a request around it), for calserve_phase_seconds.
enum class phase : std::uint8_t { tokenize, queue, h2d, infer, d2h, convert, sample, flush };
inline constexpr std::size_t phase_count = 8;
std::string_view to_string(phase p);

// How a request ended, for calserve_requests_total{outcome}.
enum class outcome : std::uint8_t { stop, length, cancelled, timeout, error, rejected };
inline constexpr std::size_t outcome_count = 6;
std::string_view to_string(outcome o);

// Device health state name (case-insensitive) -> the number calserve_device_state reports
// (device/health.hpp's table, docs/metrics.md); -1 for an unknown name.
double device_state_code(std::string_view state_name);

// Every metric family of the daemon, in one place. Who records what:
//   net/    - time_to_first_token, inter_token_latency, e2e_request_latency (client-visible,
//             measured where bytes are written), requests_total, phase{tokenize, flush}.
//   actors  - everything else (queue time, device phases, gauges, faults, recovery).
struct calserve_metrics {
    explicit calserve_metrics(registry& r);

    registry& families;           // what /metrics renders

    histogram& time_to_first_token;
    histogram& inter_token_latency;
    histogram& e2e_request_latency;
    histogram& request_queue_time;
    std::array<histogram*, phase_count> phases;
    histogram& phase_seconds(phase p) { return *phases[static_cast<std::size_t>(p)]; }

    gauge& requests_running;
    gauge& requests_waiting;
    // The bounds the two gauges above and the KV wait run into, so alerts can say
    // "near its bound" whatever the configuration (set at start-up by the daemon).
    gauge& requests_waiting_limit;            // runtime.max_queued
    gauge& kv_wait_limit_seconds;             // runtime.kv_wait_ms, in seconds
    gauge& kv_blocks_used;
    gauge& kv_blocks_capacity;
    gauge& device_state;          // numeric code, device::health_code()
    counter& device_busy_seconds;
    gauge& inflight_slots;

    std::array<counter*, outcome_count> outcomes;
    counter& requests(outcome o) { return *outcomes[static_cast<std::size_t>(o)]; }
    family<counter> faults_total;             // {point}: faults_total.labels({"wait_timeout"}).inc()
    counter& device_resets;
    histogram& recovery_seconds;
    counter& requests_recovered;
    counter& request_retries_exhausted;       // requests failed alone after runtime.max_job_retries
    family<counter> requests_failed_total;    // {class}: a fault_class name
    histogram& batch_size;                    // live rows per decode job
    counter& batch_padding_rows;              // rows computed beyond the live ones (profile padding)
    counter& preemptions_total;               // sequences whose KV was given up (recompute later)
    counter& scheduler_stalls;                // BatchTick idle with a runnable row and nothing to wake it
    // Sampling head and token chaining (docs/device.md "Sampling head").
    counter& device_drawn_rows;               // decode rows whose token the device's sampling head drew
    counter& device_topk_rows;                // decode rows the host sampled from the head's top k and log_z
    counter& chained_steps;                   // decode jobs submitted before the job they chain from was read
    counter& d2h_bytes;                       // bytes the jobs' outputs moved to the host (per row, what it returns)
    // Speculative decoding (docs/speculative.md).
    counter& spec_verify_rows;                // decode rows that carried drafts (verify rows)
    counter& spec_drafted_tokens;             // drafts sent to the device
    counter& spec_accepted_tokens;            // of them, drafts the head kept
    gauge& spec_acceptance_rate;              // accepted / drafted since start
    // Prefix cache (actors/prefix_cache.hpp).
    counter& prefix_cache_queries;            // prompt tokens looked up
    counter& prefix_cache_hits;               // of them, tokens served from cached KV
    gauge& prefix_cache_blocks;               // KV blocks held by cached (finished) sequences
    counter& prefix_cache_evictions;          // cached sequences evicted for room or dropped at a reset
    counter& prompt_tokens_total;             // prompt tokens admitted
    counter& generation_tokens_total;         // tokens generated (sampled and streamed)
    // net/: prompt work on the tokenize pool (net/tokenize_pool.hpp).
    counter& tokenize_jobs;                   // prompts tokenized on the pool's threads
    counter& tokenize_bytes;                  // prompt bytes handed to the tokenizer
    counter& tokenize_refused;          // prompts refused by byte length, untokenized
    gauge& tokenize_queue;                    // prompts waiting or running on the pool
    // Several models (engine/model_router.hpp), each labelled {model} (the alias).
    family<counter> model_requests_total;     // requests routed to the model
    family<gauge> model_generation;           // the alias' serving generation number
    family<gauge> model_in_flight;            // requests in flight on all its generations
    family<counter> model_switches_total;     // alias switches (load or rollback)
    family<counter> model_load_failures_total;  // loads refused or failed at a step

    void set_device_state(device::device_health s) { device_state.set(device::health_code(s)); }
    // From a state name (unknown names -> -1).
    void set_device_state(std::string_view state_name) { device_state.set(device_state_code(state_name)); }
};

}  // namespace calserve::metrics
