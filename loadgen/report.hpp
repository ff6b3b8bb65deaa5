#pragma once
//! From raw per-request records to the `calserve bench` summary (pure functions):
//! TTFT, TPOT, inter-token latency, end-to-end, throughput, goodput at SLOs, a
//! Little's-law check; serialised as JSONL (raw), JSON and a readable table.
//!
//! Fault model: failed and warm-up requests never enter latency figures (failures
//! are counted); a run with no successful request gives an all-zero summary.
//! Invariant: the summary is a function of (records, slo, seed) only.
#include <boost/json/object.hpp>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "loadgen/client.hpp"
#include "loadgen/stats.hpp"

namespace calserve::loadgen {

struct slo {
    std::optional<double> ttft_ms;
    std::optional<double> tpot_ms;
};

struct run_summary {
    std::size_t measured = 0;   // records counted (not warm-up)
    std::size_t succeeded = 0;
    std::size_t failed = 0;
    std::size_t met_slo = 0;
    double window_s = 0.0;       // per round: first measured send .. last measured done, summed
    std::int64_t output_tokens = 0;
    std::size_t prompt_checked = 0;   // successes whose usage.prompt_tokens the client matched
    std::size_t usage_reported = 0;   // successes whose server reported usage.completion_tokens
    double request_throughput = 0.0;  // successful requests / s
    double token_throughput = 0.0;    // output tokens / s
    double goodput = 0.0;             // requests meeting the SLOs / s
    metric_summary ttft_ms;
    metric_summary tpot_ms;
    metric_summary itl_ms;
    metric_summary e2e_ms;
    littles_law littles;
};

// Whether a successful record meets the SLOs (an unset SLO always holds).
bool meets_slo(const request_record& r, const slo& s);
run_summary summarize_run(std::span<const request_record> records, const slo& s, std::uint64_t seed);

boost::json::object record_json(const request_record& r);
boost::json::object summary_json(const run_summary& s);
std::string summary_table(const run_summary& s, const std::string& title);
// TTFT and cached prompt tokens per conversation turn (--turns); empty without turns.
std::string turn_table(std::span<const request_record> records, const std::string& title);

// Ratios B / A of the headline figures (mean TTFT, TPOT, e2e, throughputs).
boost::json::object compare_ratios(const run_summary& a, const run_summary& b);
std::string compare_table(const run_summary& a, const run_summary& b);

}  // namespace calserve::loadgen
