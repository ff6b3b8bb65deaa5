#pragma once
//! simulation: the serving engine (cpu backend, tiny model) on a deterministic
//! runtime, driven by external inputs (submits, cancels, fault arming) applied
//! at their virtual times. The seeded soak generates the inputs; replay reads
//! them from a trace (generation loads, rollbacks and unloads included: the
//! engine is a generation_host, as in a recordable daemon). Both go through `apply` and `finish`, so a trace of a
//! soak run replays through exactly the code that produced it.
//!
//! Invariants checked (a breach becomes a violation string, never a throw):
//! every accepted request gets exactly one on_finish, a rejected one none; the
//! KV pool is conserved after every step and empty at the end; no illegal
//! lifecycle transition; no runtime failure (handler escapes, mailbox
//! overloads); a greedy stream that ran to its length equals the reference
//! transformer's greedy continuation (BF16-rounded argmax, ties lowest id),
//! faults or not; the device never ends dead (only recoverable faults are armed);
//! no device call answers unknown_sequence or sequence_exists (kv_free aside) and no
//! request ends with either (the runtime never asks about a sequence the device lacks).
#include <array>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "config/result.hpp"
#include "io/trace.hpp"

namespace calserve::actors {
class runtime;
}
namespace calserve::engine {
class serving_engine;
class generation_host;
}
namespace calserve::model {
class causal_lm;
}
namespace calserve::metrics {
class registry;
struct calserve_metrics;
}

namespace calserve::soak {

struct sim_setup {
    std::filesystem::path model_dir;          // cpu backend (soak)
    std::filesystem::path package_dir;        // sim backend (replay of a daemon trace); wins when set
    std::vector<std::string> overrides;       // config key=value
    bool check_reference = true;              // recompute greedy streams on the reference model
    std::uint64_t engine_seq = 0;             // request sequence counter to continue from (trace started mid-run)
    std::string alias;                        // the served name (generation inputs name it); "" = the engine's
    // The soak's operator: a device that goes dead is not a violation; after
    // k_operator_delay_ns the operator clears the faults (the cause) and resets the
    // device through the control path (recorded as inputs, so a replay does the same),
    // and the device must be ready again within k_operator_liveness_ns. Off in replay.
    bool operator_model = false;
};

// The soak operator's reaction time to a dead device, and how soon after its reset
// the device must serve again (virtual time).
inline constexpr std::int64_t k_operator_delay_ns = 5'000'000'000;
inline constexpr std::int64_t k_operator_liveness_ns = 60'000'000'000;

struct sim_report {
    std::uint64_t submitted = 0, rejected = 0, cancels = 0, arms = 0;
    std::uint64_t slow_consumers = 0, slow_cancels = 0;  // streams read slowly / cancelled for it
    std::array<std::uint64_t, 5> finished{};  // by actors::finish_reason
    std::uint64_t greedy_checked = 0, messages = 0, faults_fired = 0, device_resets = 0, preemptions = 0;
    std::uint64_t cache_hit_tokens = 0;  // prompt tokens served from the prefix cache
    // Speculative decoding: verify rows, drafted and accepted tokens (calserve_spec_* metrics).
    std::uint64_t verify_rows = 0, drafted_tokens = 0, accepted_tokens = 0;
    std::uint64_t dead_episodes = 0, operator_resets = 0;  // device deaths, and the operator's resets after them
    std::uint64_t generation_ops = 0;  // generation loads, rollbacks and unloads applied
    std::int64_t end_ns = 0;
    std::vector<std::string> violations;
    bool ok() const { return violations.empty(); }
};

// One request as the simulation saw it, in virtual time (the predicted side of a
// what-if replay): submitted at `submit_ns`, first token at `first_token_ns` (-1:
// none), finished at `finish_ns` with `output_tokens` tokens, `max_gap_ns` its worst
// inter-token gap.
struct sim_request {
    std::string id;
    std::int64_t submit_ns = 0, first_token_ns = -1, finish_ns = 0;
    std::int64_t output_tokens = 0;
    std::string reason;
    std::int64_t max_gap_ns = 0;  // longest wait between two of its tokens
};

// Engine-wide figures of a run (metrics the engine kept): device busy time, KV
// blocks (the peak sampled at every timer and input), prefix-cache lookups.
struct engine_figures {
    double device_busy_s = 0;
    std::int64_t kv_blocks_peak = 0, kv_blocks_capacity = 0;
    double prefix_cache_queries = 0, prefix_cache_hits = 0;
};

using message_observer = std::function<void(const io::trace_message&)>;
// Inputs the simulation makes itself (a slow consumer's cancel), as they are applied.
using input_observer = std::function<void(const io::trace_input&)>;
// Fault firings on the simulated device, as they happen.
using fire_observer = std::function<void(const io::trace_fire&)>;

// A client that reads its stream at `tokens_per_s` (virtual time) and holds at most
// `queue` unread tokens; past that the network layer gives up on it and cancels the
// request ("client too slow"), which the simulation applies as a cancel input.
struct consumer_model {
    double tokens_per_s = 0;
    std::int64_t queue = 0;
};

class simulation {
public:
    static result<std::unique_ptr<simulation>> create(const sim_setup& setup, message_observer observer,
                                                      input_observer inputs = {}, fire_observer fires = {});
    ~simulation();

    std::int64_t now_ns() const;
    std::int64_t vocab_size() const;
    // True while an armed fault still has shots left.
    bool faults_armed() const;
    // True while a generation load or rollback runs its steps (another is refused meanwhile).
    bool generation_busy() const;
    // The served alias (generation inputs name it).
    const std::string& alias() const;
    // Advances virtual time to the input's time (firing timers), then applies it
    // exactly as the daemon's realtime_driver did when it was recorded. A submit
    // may come with a slow consumer.
    void apply(const io::trace_input& input, const std::optional<consumer_model>& consumer = std::nullopt);
    // Moves virtual time to `t_ns`, firing the timers due on the way (and the
    // cancels of slow consumers that overflow meanwhile, at the time they do).
    void advance_to(std::int64_t t_ns);
    // When the next timer is due (virtual ns); nullopt when none is armed.
    std::optional<std::int64_t> next_due_ns();
    // Moves the streams finished so far into outcomes() (apply and finish do too).
    void collect_finished() { check_finished_streams(); }
    // Runs until nothing is in flight and no engine still holds a sequence (or `limit_s`
    // virtual seconds), then checks the end state.
    void finish(double limit_s = 3600);
    const sim_report& report() const { return report_; }
    // Every finished request, in finishing order.
    const std::vector<sim_request>& outcomes() const { return outcomes_; }
    engine_figures figures() const;

    struct tracker;  // streams by id; defined in simulation.cpp

private:
    simulation() = default;
    void submit(const io::trace_submit& s, const std::optional<consumer_model>& consumer);
    void cancel_slow_consumers();
    void arm(const io::trace_arm& a);
    void generation_op(const io::trace_model& m);
    engine::serving_engine& engine() const;  // the serving generation's (else any resident one's)
    void check_step();
    void check_liveness();
    void check_device_calls();
    bool sequences_held() const;
    void operator_reset();
    void check_finished_streams();
    void violation(std::string what);
    void sample_kv();

    std::unique_ptr<metrics::registry> registry_;
    std::unique_ptr<metrics::calserve_metrics> metrics_;  // the engine's, as a daemon's
    std::unique_ptr<actors::runtime> rt_;
    std::unique_ptr<engine::generation_host> host_;  // the alias' generations (one, unless the inputs load more)
    std::unique_ptr<model::causal_lm> reference_;
    std::shared_ptr<tracker> tracker_;
    sim_setup setup_;
    message_observer observer_;
    input_observer inputs_;
    std::uint64_t illegal_at_start_ = 0;
    std::uint64_t next_ref_seq_ = 1;
    bool dead_reported_ = false;
    bool dead_seen_ = false;                      // the current dead episode is counted
    std::optional<std::int64_t> operator_due_;    // when the operator resets a dead device
    std::optional<std::int64_t> live_by_;         // the device must be ready by then (after an operator reset)
    sim_report report_;
    std::vector<sim_request> outcomes_;
    std::int64_t kv_blocks_peak_ = 0;
    std::map<const void*, std::uint64_t> misuses_seen_;  // per engine: device call misuses already reported
};

// The soak's default model: tiny-dense's layers with a small vocabulary (cheap tokens).
inline constexpr const char* k_soak_model_preset = "micro-dense";

// Writes the synthetic model `preset` to `dir` unless it is already there.
void_result ensure_synthetic_model(const std::filesystem::path& dir, const std::filesystem::path& tokenizer_dir,
                                   const std::string& preset = k_soak_model_preset);

}  // namespace calserve::soak
