#pragma once
//! Pure pieces of `calserve soak --real`: reading the gauges it samples out of a
//! Prometheus text page, classifying how a request ended, the least-squares slope
//! of a sampled series and the leak verdict drawn from it. No I/O, no clock, so
//! every rule is table-tested (tests/soak/real_soak_stats_test.cpp).
//!
//! Invariants: a classification is a function of what the client saw (HTTP status,
//! error code, whether it set a deadline or closed the connection itself); a slope
//! needs at least two distinct x values, else it is reported as absent.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace calserve::soak {

// The series sampled every interval (NaN when the page did not carry one).
struct daemon_gauges {
    double rss_bytes = 0, open_fds = 0, threads = 0, cpu_seconds = 0;
    double heap_bytes = 0;  // NaN when the daemon does not serve process_heap_bytes
    double kv_blocks_used = 0, inflight_slots = 0, requests_running = 0, requests_waiting = 0;
};

// Value of an unlabelled sample `name` in exposition text, if present.
std::optional<double> find_sample(std::string_view page, std::string_view name);
// All of daemon_gauges; fails (nullopt) when a process_* or KV gauge is missing.
std::optional<daemon_gauges> parse_gauges(std::string_view page);

// How one request ended, as the soak counts it.
enum class request_outcome : std::uint8_t {
    completed,      // finish_reason stop/length
    deadline,       // 504 / deadline_exceeded, on a request that set timeout_ms
    disconnected,   // the client closed the connection mid-stream on purpose
    shed,           // capacity or retryable class (429, 503 overloaded/busy): load shedding
    fault,          // device-class error (503) while faults were being injected
    // job_retries_exhausted while faults were being injected: the poison-request rule
    // (runtime.max_job_retries, docs/faults.md) failed it alone after its jobs met faults
    retries_exhausted,
    unexpected,     // anything else: a bug or a dead daemon
};
inline constexpr std::size_t request_outcome_count = 7;
std::string_view to_string(request_outcome o);

struct seen_end {
    int http_status = 0;          // 0: no response (transport failure)
    std::string error_code;       // the error body's `code` (or a stream error event's), empty if none
    bool finished = false;        // a finish_reason stop/length and, when streaming, [DONE]
    bool closed_by_client = false;
    bool set_deadline = false;
    bool faults_armed = false;    // the run injects faults
};
request_outcome classify(const seen_end& e);

// Least-squares line y = slope * x + intercept. Absent with fewer than two
// distinct x values.
struct line_fit {
    double slope = 0;
    double intercept = 0;
    std::size_t points = 0;
};
std::optional<line_fit> least_squares(std::span<const double> x, std::span<const double> y);

// The fd leak rule: descriptors per request after warm-up. A leak is "clear" when
// the slope is over `max_fds_per_request` AND the fitted rise over the window
// exceeds `noise_fds` (connections in flight make the count swing by about the
// concurrency) AND there are at least `min_points` samples.
struct fd_leak_rule {
    double max_fds_per_request = 0.01;  // 1 fd per 100 requests
    double noise_fds = 16;
    std::size_t min_points = 5;
};
struct fd_verdict {
    bool leak = false;
    bool judged = false;          // enough data to say anything
    double fds_per_request = 0;
    double rise_fds = 0;          // slope x requests spanned
};
fd_verdict judge_fds(std::span<const double> requests_done, std::span<const double> open_fds, const fd_leak_rule& rule);

// A warning (not a failure): a series over time grows "clearly" when its fitted
// rise over the window (slope x time spanned) exceeds `min_rise` and there are at
// least `min_points` samples. Used for RSS and threads, whose level legitimately
// moves with load, so only a sustained rise counts.
struct growth {
    bool judged = false;
    bool growing = false;
    double rise = 0;
};
growth judge_growth(std::span<const double> t, std::span<const double> v, double min_rise,
                    std::size_t min_points = 5);

}  // namespace calserve::soak
