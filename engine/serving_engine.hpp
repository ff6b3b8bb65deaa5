#pragma once
//! serving_engine: the `engine` the network layer talks to, built from the six
//! actors on one runtime (threaded for the daemon, deterministic for tests,
//! replay and soak):
//!
//!   net --submit--> Request --bt_admit--> BatchTick --kv_reserve--> KvManager
//!                      ^                      | cs_run
//!                      |  rq_token            v
//!                      +------------------ ChipSession --da_execute--> DeviceActor --> device (sim)
//!                                           |   ^  cs_job_done             |
//!                                 sm_sample v   | cs_sampled               | wait_async completion
//!                                          Sampler                         v
//!
//! `submit` validates against the model and admission limits before any
//! device work. Backends: `sim` serves a calbin package on the simulated NPU;
//! `cpu` serves a Hugging Face directory with the same simulator at zero
//! pacing (the reference transformer, no NPU timing).
#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "actors/runtime/actor.hpp"
#include "actors/engine.hpp"
#include "engine/watchdog.hpp"
#include "config/config.hpp"
#include "device/health.hpp"

namespace calserve::metrics {
struct calserve_metrics;
}

namespace calserve::device {
class device;
class fault_registry;
namespace sim {
class sim_scheduler;
}
}
namespace calserve::model {
class tokenizer;
}

namespace calserve::actors {
class request_actor;
class batch_tick_actor;
class chip_session_actor;
class kv_manager_actor;
class device_actor;
class sampler_actor;
class engine_journal;
struct device_actor_options;
struct batch_tick_options;
struct kv_cache_options;
struct door_input;
struct sequence_constraint;
}  // namespace calserve::actors

namespace calserve::engine {

struct engine_setup {
    std::filesystem::path package_dir;     // sim backend: a calbin package directory
    std::filesystem::path model_dir;       // cpu backend: a Hugging Face model directory
    std::string model_name;                // served id; default: the package/model directory name
    metrics::calserve_metrics* metrics = nullptr;
    // Shared by every model of a board (the model router); null = the engine's own.
    std::shared_ptr<device::fault_registry> faults;
};

// Declares the points an engine's device and sampler consume on `faults`.
void declare_engine_consumers(device::fault_registry& faults);

class serving_engine final : public actors::engine {
public:
    static result<std::unique_ptr<serving_engine>> create(actors::runtime& rt, const config& cfg, const engine_setup& setup);
    ~serving_engine() override;

    void_result submit(actors::generation_request request, std::shared_ptr<actors::generation_sink> sink) override;
    void cancel(const std::string& request_id) override;
    const actors::model_card& card() const override { return card_; }
    actors::engine_health health() const override;
    result<std::vector<actors::token_id>> encode(std::string_view text) const override;
    result<std::vector<actors::token_id>> encode_prompt(std::string_view text, std::int64_t max_tokens) const override;
    result<std::string> decode(const std::vector<actors::token_id>& ids) const override;
    result<std::string> apply_chat_template(const std::vector<actors::chat_message>& messages,
                                            const actors::chat_options& options) const override;
    result<std::shared_ptr<const model::grammar::compiled>> compile_grammar(model::grammar::grammar_kind kind,
                                                                           std::string_view text) const override;
    void drain() override { accepting_.store(false); }
    void resume() override { accepting_.store(true); }
    std::int64_t in_flight() const override;

    // Unloading a generation: refuses new work and stops the engine's actors (their
    // mailboxes are dropped). Call once nothing is in flight; the engine object must
    // then outlive any device event still pending (the router keeps it a grace period).
    void shutdown();

    // Operations and tests.
    device::device_health device_state() const;
    void reset_device(std::string reason);
    // Frees every cached sequence's KV (control socket `cache.clear`).
    void clear_prefix_cache();
    device::device& dev() { return *device_; }
    std::shared_ptr<device::fault_registry> faults() const;
    const actors::kv_manager_actor& kv_manager() const;
    const actors::batch_tick_actor& batch_tick() const;
    std::uint64_t device_resets() const;
    // Recent jobs per slot and device transitions (the console's engine view).
    const actors::engine_journal& journal() const { return *journal_; }
    // The engine's clock (runtime time), the journal's time base.
    std::chrono::nanoseconds now() const;
    // The sequence number of a request in flight (its admission order, from 1; fault
    // sites match `request` against it), or nullopt once it has ended.
    std::optional<std::uint64_t> sequence_of(const std::string& request_id) const;
    // The request sequence counter (sampling seeds derive from it): a trace
    // started mid-run records it, its replay continues from it.
    std::uint64_t sequence_counter() const { return next_seq_.load(); }
    void set_sequence_counter(std::uint64_t value) { next_seq_.store(value); }

    struct registry;  // request id / sequence id -> Request actor, and counters
    struct watch;     // progress watchdog + mailbox watch, shared with sinks and the watch timer

private:
    serving_engine() = default;
    void_result build(actors::runtime& rt, const config& cfg, const engine_setup& setup);
    void_result open_device(const config& cfg, const engine_setup& setup);
    void spawn_actors(actors::device_actor_options dopt, actors::batch_tick_options bopt, actors::kv_cache_options cache, std::int64_t kv_blocks,
                      std::int64_t block_tokens, int sampler_threads);
    actors::door_input door_admission(std::int64_t prompt, std::int64_t max_tokens) const;
    void start_watch(std::chrono::nanoseconds interval);
    result<std::unique_ptr<actors::sequence_constraint>> make_constraint(actors::output_constraint& c) const;

    actors::runtime* rt_ = nullptr;
    metrics::calserve_metrics* metrics_ = nullptr;
    std::unique_ptr<device::sim::sim_scheduler> scheduler_;  // outlives the device's pending events
    std::shared_ptr<device::device> device_;
    std::shared_ptr<device::fault_registry> faults_;
    std::shared_ptr<const model::tokenizer> tokenizer_;
    std::shared_ptr<registry> registry_;
    std::shared_ptr<watch> watch_;
    std::shared_ptr<actors::engine_journal> journal_;
    std::shared_ptr<std::function<void()>> watch_tick_;  // the periodic check; dies with the engine
    actors::model_card card_;
    std::vector<actors::token_id> eos_ids_;
    // Built on the first constrained request (the vocabulary walk is not free), then shared.
    mutable std::once_flag grammar_once_;
    mutable std::unique_ptr<model::grammar::compile_cache> grammar_cache_;
    std::int64_t max_running_ = 0, max_queued_ = 0, default_timeout_ms_ = 0;
    std::string cache_identity_;  // the package the prefix cache scope names
    std::atomic<bool> accepting_{true};
    std::atomic<std::uint64_t> next_seq_{0};
    actors::address<actors::batch_tick_actor> tick_;
    actors::address<actors::chip_session_actor> session_;
    actors::address<actors::kv_manager_actor> kv_;
    actors::address<actors::device_actor> device_actor_;
    actors::address<actors::sampler_actor> sampler_;
};

}  // namespace calserve::engine
