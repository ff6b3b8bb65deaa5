#include "loadgen/stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace calserve::loadgen {
namespace {

double sorted_percentile(const std::vector<double>& sorted, double p) {
    if (sorted.empty()) return 0.0;
    const double clamped = std::clamp(p, 0.0, 100.0);
    const double rank = clamped / 100.0 * static_cast<double>(sorted.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(rank));
    const auto hi = std::min(lo + 1, sorted.size() - 1);
    const double frac = rank - static_cast<double>(lo);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

std::vector<double> sorted_copy(std::span<const double> samples) {
    std::vector<double> v(samples.begin(), samples.end());
    std::sort(v.begin(), v.end());
    return v;
}

}  // namespace

double percentile(std::span<const double> samples, double p) { return sorted_percentile(sorted_copy(samples), p); }

double mean(std::span<const double> samples) {
    if (samples.empty()) return 0.0;
    return std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size());
}

double median(std::span<const double> samples) { return percentile(samples, 50.0); }

double mad(std::span<const double> samples) {
    if (samples.empty()) return 0.0;
    const double m = median(samples);
    std::vector<double> dev;
    dev.reserve(samples.size());
    for (double x : samples) dev.push_back(std::fabs(x - m));
    return median(dev);
}

interval bootstrap_mean_ci(std::span<const double> samples, std::uint64_t seed, int resamples) {
    if (samples.empty() || resamples <= 0) return {};
    std::mt19937_64 gen(seed);
    // Index drawn from raw 64-bit output (not std::uniform_int_distribution, whose
    // algorithm differs between standard libraries) so the interval is portable.
    const std::uint64_t n = samples.size();
    std::vector<double> means;
    means.reserve(static_cast<std::size_t>(resamples));
    for (int r = 0; r < resamples; ++r) {
        double sum = 0.0;
        for (std::uint64_t i = 0; i < n; ++i) sum += samples[static_cast<std::size_t>(gen() % n)];
        means.push_back(sum / static_cast<double>(n));
    }
    std::sort(means.begin(), means.end());
    return interval{sorted_percentile(means, 2.5), sorted_percentile(means, 97.5)};
}

metric_summary summarize(std::span<const double> samples, std::uint64_t seed) {
    metric_summary s;
    s.count = samples.size();
    if (samples.empty()) return s;
    const auto sorted = sorted_copy(samples);
    s.mean = mean(samples);
    s.p50 = sorted_percentile(sorted, 50.0);
    s.p90 = sorted_percentile(sorted, 90.0);
    s.p99 = sorted_percentile(sorted, 99.0);
    s.mad = mad(samples);
    s.min = sorted.front();
    s.max = sorted.back();
    s.mean_ci = bootstrap_mean_ci(samples, seed);
    return s;
}

std::optional<double> request_tpot(double e2e_s, double ttft_s, std::int64_t tokens) {
    if (tokens < 2 || e2e_s < ttft_s) return std::nullopt;
    return (e2e_s - ttft_s) / static_cast<double>(tokens - 1);
}

std::vector<double> inter_token_gaps(std::span<const double> token_times) {
    std::vector<double> gaps;
    for (std::size_t i = 1; i < token_times.size(); ++i) gaps.push_back(token_times[i] - token_times[i - 1]);
    return gaps;
}

double mean_concurrency(std::span<const span_interval> spans, double window_start, double window_end) {
    const double width = window_end - window_start;
    if (width <= 0.0) return 0.0;
    double busy = 0.0;
    for (const auto& s : spans) {
        const double a = std::max(s.start, window_start);
        const double b = std::min(s.end, window_end);
        if (b > a) busy += b - a;
    }
    return busy / width;
}

littles_law littles_law_check(double measured_concurrency, std::size_t completed, double window_s,
                              double mean_latency_s) {
    littles_law l;
    l.mean_concurrency = measured_concurrency;
    l.mean_latency_s = mean_latency_s;
    if (window_s > 0.0) l.arrival_rate = static_cast<double>(completed) / window_s;
    l.predicted = l.arrival_rate * mean_latency_s;
    if (l.predicted > 0.0) l.ratio = measured_concurrency / l.predicted;
    return l;
}

}  // namespace calserve::loadgen
