#pragma once
//! The seeded soak and trace replay.
//!
//! `run_soak` derives every option of a run (traffic rate, lengths, sampling
//! mix, cancel and deadline rates, fault points and their rates, engine config)
//! from one seed, prints them, generates open-loop traffic lazily in virtual
//! time and feeds it to a `simulation`. The same seed always yields the same
//! inputs and, the runtime being deterministic, the same message stream.
//! With a trace path, every input and message is recorded; on a failed run
//! without one, the run is repeated with tracing on (same seed, same run) so
//! the failure always leaves a trace behind.
//!
//! `run_replay` feeds a trace's inputs at their recorded virtual times and
//! compares the delivered messages with the recorded ones, stopping at the
//! first divergence; with `replay_options` it is the what-if replay's run (the
//! same engine and code, another package or configuration, soak/what_if.hpp).
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>

#include "config/result.hpp"
#include "io/trace.hpp"
#include "soak/simulation.hpp"

namespace calserve::soak {

struct soak_options {
    std::uint64_t seed = 1;
    std::int64_t duration_ns = 60'000'000'000;  // virtual time of traffic
    std::filesystem::path model_dir;            // cpu backend
    std::filesystem::path package_dir;          // sim backend (simulated NPU); wins when set
    std::string trace_path;                     // empty: trace only on failure (to failure_trace_path)
    std::string failure_trace_path;             // default: calserve-soak-<seed>.trace.jsonl
    bool check_reference = true;
    // Release generations under the traffic (`--generations`): every few virtual seconds a
    // load of the same model or package as a new generation kept beside the old one
    // (--keep), then a rollback to it, and so on (generated from a stream of their own,
    // so a seed's traffic is the one it has without them).
    bool generations = false;
};

struct soak_outcome {
    sim_report report;
    std::string trace_written;                  // path, when a trace was written
    std::uint64_t trace_dropped = 0;
};

// Parses "90s", "15m", "1h", "24h", "500ms" or plain seconds.
result<std::int64_t> parse_duration_ns(const std::string& text);

result<soak_outcome> run_soak(const soak_options& o, std::ostream& out);

struct replay_outcome {
    std::uint64_t compared = 0;                 // messages matched before the end or divergence
    std::optional<std::uint64_t> divergence_seq;
    std::uint64_t fires_compared = 0;           // fault firings matched
    std::optional<std::uint64_t> fire_divergence;  // 1-based index of the first firing that differs
    std::string expected, got;                  // described messages at the divergence
    sim_report report;
    std::vector<sim_request> outcomes;      // every finished request, virtual time
    engine_figures figures;
};

// How a replay differs from the recording: a what-if (docs/twin.md) runs the recorded
// workload on another package or with configuration keys set on top of the recorded
// ones, and usually without the operator's inputs. The defaults are the exact replay.
struct replay_options {
    std::filesystem::path package_dir;          // empty: the recorded package
    std::vector<std::string> overrides;         // key=value, applied after the recorded ones
    bool operator_inputs = true;                // fault arms/clears, control commands, generation ops
    bool stop_at_divergence = true;             // false: run the whole workload, note the first divergence
};
result<replay_outcome> run_replay(const io::trace_file& trace, const replay_options& options = {});

}  // namespace calserve::soak
