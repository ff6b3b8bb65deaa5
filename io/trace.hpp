#pragma once
//! Trace records: what a run saw from outside (submits with their arrival time
//! and full request, cancels, fault arming and clearing, control commands,
//! generation loads, rollbacks and unloads) and
//! every actor message the runtime delivered (sequence, virtual time, from, to,
//! type). One JSON object per line (docs/trace.md). `io/` sits below the
//! actors, so records carry plain fields; soak/ converts them to engine calls.
//!
//! Invariants: encode(parse(line)) round-trips every field; a record with an
//! unknown kind or a missing field is a parse error, never silently defaulted.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/result.hpp"

namespace calserve::io {

inline constexpr int k_trace_version = 2;

struct trace_header {
    int version = k_trace_version;
    std::string source = "soak";          // "soak" (seeded simulation) or "daemon" (calserve serve)
    std::uint64_t seed = 0;
    std::string model_dir;                // cpu backend: the Hugging Face model directory
    std::string package_dir;              // sim backend: the calbin package directory
    std::vector<std::string> overrides;   // config key=value of the run (daemon: every runtime/device key)
    std::int64_t duration_ns = 0;
    // Where the recording began: true = with the engine's creation. A trace
    // started later (control socket, idle engine) carries the engine's request
    // sequence counter so replayed sampling seeds match.
    bool from_start = true;
    std::uint64_t engine_seq = 0;
    // The packages the daemon started with, "ALIAS=DIR" (DIR absolute); a generation
    // load names its own. Absent in traces written before generations were recorded.
    std::vector<std::string> packages;
};

struct trace_submit {
    std::int64_t t_ns = 0;
    std::string id;
    std::vector<std::int32_t> prompt;
    std::int64_t max_tokens = 0;
    double temperature = 0, top_p = 1;
    std::int32_t top_k = 0;
    std::optional<std::uint64_t> seed;
    bool ignore_eos = true;
    std::int64_t timeout_ms = 0;
    double min_p = 0, presence_penalty = 0, frequency_penalty = 0, repetition_penalty = 1;
    std::vector<std::pair<std::int32_t, double>> logit_bias;
    bool logprobs = false;
    std::int32_t top_logprobs = 0;
    std::vector<std::string> stop;
    std::vector<std::int32_t> stop_token_ids;
    // Output constraint (actors::output_constraint): grammar kind and text, thinking,
    // reasoning budget. Absent in older traces (no constraint).
    std::int32_t grammar_kind = 0;
    std::string grammar;
    std::string cache_salt;           // prefix cache scope (absent from the record when empty)
    bool thinking = false;
    std::int64_t max_reasoning_tokens = -1;
};

struct trace_cancel {
    std::int64_t t_ns = 0;
    std::string id;
};

struct trace_arm {
    std::int64_t t_ns = 0;
    std::string point;                    // device::fault_point name
    std::string mode;                     // once | count | probability | always
    std::int64_t count = 1;
    double probability = 1;
    std::uint64_t seed = 0;
    double delay_ms = 0;
    // Match filters; absent = any (docs/faults.md).
    std::optional<std::uint32_t> chip;
    std::optional<std::string> submodel;
    std::optional<std::uint64_t> request, sequence;
};

// fault.clear: everything, one point, or one arm id.
struct trace_clear {
    std::int64_t t_ns = 0;
    std::optional<std::string> point;
    std::optional<std::uint64_t> id;
};

// An operator command that changes what the engine does: drain, resume, reset (device).
struct trace_control {
    std::int64_t t_ns = 0;
    std::string command;
};

// A generation operation (docs/generations.md): load, rollback or unload of an alias.
struct trace_model {
    std::int64_t t_ns = 0;
    std::string op;                       // load | rollback | unload
    std::string alias;
    std::string dir;                      // load: the package directory (absolute); "" otherwise
    bool keep = false, replace = false;   // load's --keep / --replace
};

struct trace_message {
    std::uint64_t seq = 0;
    std::int64_t t_ns = 0;
    std::uint64_t from_id = 0, to_id = 0;
    std::string from, to, type;
    friend bool operator==(const trace_message&, const trace_message&) = default;
};

// A fault firing (informative, like a message: a consequence of the inputs on
// the simulated device, recorded so a replay can check it and a reader can see it).
struct trace_fire {
    std::int64_t t_ns = 0;
    std::string point;
    std::uint64_t arm_id = 0;
    friend bool operator==(const trace_fire&, const trace_fire&) = default;
};

// A request's outcome as the daemon measured it, written when it finished: the
// "recorded" side of a what-if replay (docs/twin.md). Times are the daemon's
// steady clock from the moment the engine applied the submit, so they include
// host work the virtual clock does not model. Informative: replay ignores it.
struct trace_done {
    std::int64_t t_ns = 0;                // virtual time of the finish
    std::string id;
    std::string reason;                   // stop | length | cancelled | timeout | error
    std::int64_t output_tokens = 0;
    std::int64_t ttft_ns = -1;            // wall: submit applied -> first token; -1 when none came
    std::int64_t e2e_ns = 0;              // wall: submit applied -> finish
    // How far the apply was past the submit's virtual stamp on the driver's wall-clock
    // mapping: 0 unless virtual time lagged the wall clock (host slower than the model).
    std::int64_t apply_lag_ns = 0;
    friend bool operator==(const trace_done&, const trace_done&) = default;
};

struct trace_end {
    std::int64_t t_ns = 0;
    std::uint64_t messages = 0;
    std::uint64_t dropped = 0;
};

using trace_input = std::variant<trace_submit, trace_cancel, trace_arm, trace_clear, trace_control, trace_model>;
using trace_record = std::variant<trace_header, trace_submit, trace_cancel, trace_arm, trace_clear, trace_control,
                                  trace_model, trace_message, trace_fire, trace_done, trace_end>;

std::string encode(const trace_record& record);
result<trace_record> parse_record(std::string_view line);
std::int64_t input_time(const trace_input& in);
std::string describe(const trace_message& m);  // one-line human form for divergence reports
std::string describe(const trace_fire& f);

// A whole trace file, split by kind (inputs and messages keep file order).
struct trace_file {
    trace_header header;
    std::vector<trace_input> inputs;
    std::vector<trace_message> messages;
    std::vector<trace_fire> fires;
    std::vector<trace_done> done;         // daemon traces written since outcomes were recorded
    std::optional<trace_end> end;
};
result<trace_file> read_trace(const std::string& path);

}  // namespace calserve::io
