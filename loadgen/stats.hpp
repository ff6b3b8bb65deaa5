#pragma once
//! Statistics of `calserve bench` as pure functions (no I/O, no clocks), so every
//! figure in a summary can be recomputed from the raw JSONL and is unit-tested.
//!
//! Fault model: empty inputs give count 0 and zeros (never NaN in a summary);
//! per-request TPOT is undefined for fewer than two tokens and is then absent.
//! Invariants: percentiles are monotone in p and lie within [min, max]; the
//! bootstrap confidence interval depends only on (samples, seed, resamples).
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace calserve::loadgen {

// Linear interpolation between closest ranks (the "R-7" definition), p in [0, 100].
double percentile(std::span<const double> samples, double p);
double mean(std::span<const double> samples);
double median(std::span<const double> samples);
// Median absolute deviation from the median (unscaled): robust spread.
double mad(std::span<const double> samples);

struct interval {
    double lo = 0.0;
    double hi = 0.0;
};

// 95% percentile-bootstrap interval of the mean: `resamples` resamples with
// replacement drawn from a generator seeded with `seed` (deterministic).
interval bootstrap_mean_ci(std::span<const double> samples, std::uint64_t seed, int resamples = 1000);

struct metric_summary {
    std::size_t count = 0;
    double mean = 0.0;
    double p50 = 0.0;
    double p90 = 0.0;
    double p99 = 0.0;
    double mad = 0.0;
    double min = 0.0;
    double max = 0.0;
    interval mean_ci;  // 95% bootstrap
};

metric_summary summarize(std::span<const double> samples, std::uint64_t seed);

// Per-request time per output token after the first: (e2e - ttft) / (tokens - 1).
std::optional<double> request_tpot(double e2e_s, double ttft_s, std::int64_t tokens);

// Gaps between consecutive token arrival times (inter-token latencies).
std::vector<double> inter_token_gaps(std::span<const double> token_times);

struct span_interval {
    double start = 0.0;
    double end = 0.0;
};

// Time-weighted mean number of intervals open inside [window_start, window_end].
double mean_concurrency(std::span<const span_interval> spans, double window_start, double window_end);

// Little's law L = lambda x W: `mean_concurrency` is measured from all requests on
// the wire (warm-up and failures too), lambda and W from the measured ones, so a
// ratio far from 1 says warm-up overlap, failures or a clock error bias the run.
struct littles_law {
    double mean_concurrency = 0.0;
    double arrival_rate = 0.0;  // completed requests / s over the window
    double mean_latency_s = 0.0;
    double predicted = 0.0;     // arrival_rate x mean_latency_s
    double ratio = 0.0;         // mean_concurrency / predicted (0 when undefined)
};

littles_law littles_law_check(double measured_concurrency, std::size_t completed, double window_s,
                              double mean_latency_s);

}  // namespace calserve::loadgen
