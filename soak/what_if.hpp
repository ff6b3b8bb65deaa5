#pragma once
//! The what-if replay (docs/twin.md): a recorded workload re-run in virtual time
//! on the deterministic runtime with another package or configuration, its
//! per-request TTFT / TPOT / end-to-end times and their summary set beside what
//! the daemon measured when it served the recording (the trace's `done` records).
//!
//! It is `run_replay` with options, so the twin is the real engine: on the
//! recording's own package and configuration it delivers the recorded message
//! stream (reported as `stream`), and the predictions come from that same run.
//! Predicted times are virtual time (deterministic, independent of the load of
//! the machine running it); recorded times are the daemon's steady clock.
//!
//! Fault model: an unreadable trace or a missing package is an error before
//! anything runs; a trace without `done` records has no recorded side (the
//! report says so, the predicted side stands alone).
//! Invariants: summaries are pure functions of the per-request rows; every
//! percentile lies within the rows' range; TPOT is defined for two tokens or more.
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "config/result.hpp"
#include "io/trace.hpp"
#include "soak/soak.hpp"

namespace calserve::soak {

struct slo_targets {
    double ttft_ms = 0, tpot_ms = 0;  // 0: no target on that figure
};

// One request's client-visible times (ms); -1 where undefined.
struct request_times {
    std::string id;
    double submit_ms = 0;             // arrival, virtual ms since the runtime started
    double ttft_ms = -1, tpot_ms = -1, e2e_ms = 0;
    std::int64_t output_tokens = 0;
    double max_gap_ms = -1;           // worst inter-token gap; -1 where not measured (recorded side)
};

struct percentiles {
    std::size_t count = 0;
    double p50 = 0, p90 = 0, p99 = 0;
};

struct run_summary {
    std::size_t requests = 0;
    percentiles ttft_ms, tpot_ms, e2e_ms;
    std::int64_t output_tokens = 0;
    double window_s = 0;              // first arrival to last finish
    double output_tok_s = 0;
    std::size_t met_slo = 0;          // requests meeting every target given
    double goodput_rps = 0;           // met_slo / window_s
    double max_gap_ms = -1;           // worst inter-token gap of any request (-1: not measured)
};

// What only the twin sees: the engine's own figures over the predicted run.
struct engine_summary {
    double device_busy_fraction = 0;  // modelled device compute time / window
    double kv_peak_fraction = 0;      // most KV blocks in use at once / capacity
    std::uint64_t preemptions = 0;
    double prefix_cache_hit_rate = 0; // prompt tokens served from cache / looked up
    std::uint64_t drafted = 0, accepted = 0;  // speculative decoding: drafted tokens, of them kept
};

struct what_if_report {
    std::string label;
    run_summary predicted;
    engine_summary engine;
    std::optional<run_summary> recorded;
    std::vector<request_times> predicted_rows, recorded_rows;
    // The message stream against the recording's (identical on its own configuration).
    std::uint64_t messages_compared = 0;
    bool stream_identical = false;
    std::string divergence;           // the first differing message, when not identical
};

std::vector<request_times> predicted_times(std::span<const sim_request> outcomes);
// From the trace's `done` records (arrival from the matching submit).
std::vector<request_times> recorded_times(const io::trace_file& trace);
run_summary summarize(std::span<const request_times> rows, const slo_targets& slo);

result<what_if_report> run_what_if(const io::trace_file& trace, const replay_options& options, const slo_targets& slo,
                                   std::string label);

// `predicted` and `recorded` (when there is one) each with ttft_ms / tpot_ms / e2e_ms
// {p50,p90,p99}, output_tok_s, goodput; `engine`; `stream`.
boost::json::object to_json(const what_if_report& r);
// The A/B table: the recorded run, then one row per report.
std::string render_table(std::span<const what_if_report> reports);
// Per request: predicted beside recorded.
std::string render_requests(const what_if_report& r);

}  // namespace calserve::soak
