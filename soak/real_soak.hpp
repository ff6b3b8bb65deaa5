#pragma once
//! `calserve soak --real`: wall-clock load with faults against a live daemon.
//!
//! Role: the virtual-time soak (soak.hpp) proves the runtime's invariants
//! deterministically; this one runs the real binary for minutes or hours over
//! loopback and watches for what only a real process shows: memory, descriptor
//! and thread growth, a daemon that stops answering, KV or device slots that stay
//! held once the load stops.
//!
//! Everything the traffic does is derived from one seed and printed first: prompt
//! lengths and max_tokens, the greedy/sampled and streaming/non-streaming mix,
//! client deadlines (timeout_ms), disconnects mid-stream, slow consumers, and, with
//! a control socket, fault arms and periodic fault.clear; and hostile clients:
//! connection floods (idle connections that send nothing), readers that never
//! read their stream, and, given the daemon's pid, SIGHUP; during each the daemon
//! must still answer /health. Arms are recoverable
//! device faults, `once`, and only when the previous one has fired and /ready is
//! 200: a fault firing into a reset's warm-up fails that reset, and
//! device.reset_limit failed resets in a row kill the device. Which worker sends
//! what is seeded; the interleaving is not (wall clock), so a failure names the
//! seed but a run is not bit-reproducible.
//!
//! Fault model: the daemon may refuse, shed, time out or fail requests with
//! documented fault classes; those are counted, not failures. A failure is an
//! error outside them, a daemon that stops answering, KV/in-flight not back to 0
//! after a settle, or an fd slope that clearly grows with requests.
//!
//! Invariants: every request sent ends in exactly one outcome (the counts add up
//! to the number sent); samples are taken at a fixed interval for the whole run.
#include <array>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "config/result.hpp"
#include "soak/real_soak_stats.hpp"

namespace calserve::soak {

struct real_soak_options {
    std::string url;                         // http://host:port
    std::string control_socket;              // empty: no fault injection
    std::int64_t duration_ms = 60'000;       // traffic time
    int concurrency = 4;                     // closed-loop workers
    std::uint64_t seed = 1;
    std::int64_t sample_interval_ms = 1000;
    double warmup_share = 0.2;               // leading part of the run left out of slopes
    std::string out_path;                    // samples as JSONL (empty: none)
    std::int64_t settle_ms = 20'000;         // after the load: wait this long at most for KV/in-flight 0
    std::int64_t io_timeout_ms = 60'000;     // a socket read/write blocked longer: daemon not answering
    int daemon_pid = 0;                      // > 0: the hostile phase also sends it SIGHUP
};

struct sample_point {
    double t_s = 0;                          // since the load started
    double requests_done = 0;
    daemon_gauges gauges;
};

struct series_summary {
    double first = 0, last = 0, max = 0;
    bool has_slope = false;
    double slope_per_hour = 0;               // least squares over the post-warm-up samples
    growth trend;                            // the warning rule over the same samples
};

struct real_soak_report {
    std::uint64_t sent = 0;
    std::array<std::uint64_t, request_outcome_count> outcomes{};
    std::map<std::string, std::uint64_t> errors;        // error_key -> count (every non-completion)
    std::map<std::string, std::uint64_t> unexpected;    // the subset that fails the run
    // Each unexpected or retries_exhausted outcome (the first k_ids_kept), with its
    // "<X-Request-Id> <error key>", to find the daemon's warning line for it.
    std::vector<std::pair<request_outcome, std::string>> request_ids;
    static constexpr std::size_t k_ids_kept = 100;
    std::uint64_t arms = 0, arms_refused = 0, arms_deferred = 0, clears = 0;  // deferred: last fault pending
    // Hostile phase: actions taken, and those during which /health did not answer.
    std::uint64_t hups = 0, floods = 0, flood_connections = 0, never_read = 0, health_misses = 0;
    std::vector<sample_point> samples;
    std::size_t warmup_samples = 0;
    series_summary rss, fds, threads;
    series_summary heap;  // reported, not judged: RSS is (heap growth = memory still referenced)
    fd_verdict fd;
    bool daemon_answering = true;
    bool settled = false;
    daemon_gauges final_gauges;
    double settle_s = 0;

    std::uint64_t accounted() const;
    bool ok() const;
    std::vector<std::string> failures() const;
    std::vector<std::string> warnings() const;   // growth that does not fail the run (RSS, threads)
};

// Runs the soak, printing the plan, progress every ~10% and the report to `out`.
// Errors: unusable input or a daemon unreachable at the start (before any load).
result<real_soak_report> run_real_soak(const real_soak_options& o, std::ostream& out);

// The end-of-run report: outcomes, error table, series with their slopes, settle
// state and one verdict line ("verdict: ok" or "verdict: FAIL ...").
void print_report(const real_soak_report& r, const real_soak_options& o, std::ostream& out);

// Slope summary of one series over samples[from..] (pure; used by the report).
// `min_rise`: the fitted rise that makes the series "growing" (judge_growth).
series_summary summarize(const std::vector<sample_point>& samples, std::size_t from,
                         double (*pick)(const daemon_gauges&), double min_rise);

}  // namespace calserve::soak
