#pragma once
//! generation_controller: the one owner of release generations (docs/generations.md),
//! used by both hosts of them: the model router (threaded daemon, several aliases)
//! and the generation_host (recordable daemon and replay, one alias).
//!
//! It keeps every alias' records (its generations, current and previous, the next
//! number), runs a load's steps as a step machine (generation_lifecycle.hpp: validate
//! and place and configure -> warm up -> golden check -> switch; a failure at any step
//! leaves the serving generation untouched), and owns the switch, the drain and
//! retirement, rollback, unload, a failed --replace's restore, the resident-byte
//! accounting that plans a load beside what is resident, and the graveyard of
//! shut-down engines.
//!
//! The steps run on a *driver* (generation_driver.hpp): each step that waits for
//! requests (warm-up, golden corpus) ends by submitting them; their sinks post the
//! next step onto the driver. The deterministic runtime's driver posts onto the
//! runtime, so a replay takes the same steps at the same virtual times; the worker
//! driver of the threaded daemon runs them on one thread of its own, which also
//! ticks `housekeeping` (drains, step deadlines, the graveyard).
//!
//! What the hosts differ in comes in as hooks: how an engine is configured, when a
//! draining generation no longer holds requests, what a request in its tail is, and
//! where the alias mapping persists.
//!
//! Threads: the steps, `retire` and `housekeeping` run on the driver's thread; the
//! commands (`load`, `rollback`, `unload`) and the views may come from any thread.
//! Every field of a record is guarded by the controller's mutex; the running load's
//! step data (`pending`) is touched on the driver's thread only.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "config/config.hpp"
#include "engine/generation_lifecycle.hpp"

namespace calserve::metrics {
struct calserve_metrics;
}

namespace calserve::engine {

class serving_engine;
class generation_driver;

struct load_request {
    std::string alias;
    std::filesystem::path dir;
    bool replace = false;               // drain the serving generation first when both do not fit
    bool keep = false;                  // keep the old generation resident after the switch
};

struct generation_info {
    std::string alias;
    std::uint64_t generation = 0;
    std::string dir;
    std::string state;
    std::string reason;                 // why it failed (or how it ended)
    std::vector<std::uint32_t> chips;
    bool resident = false;
    bool current = false;
    std::int64_t in_flight = 0;
    double switch_ms = 0;               // load command to serving (serving generations)
    double drain_ms = 0;                // the tail of a retired generation: switch away to drained
    std::int64_t tail_requests = 0;     // requests it still had in flight when it started draining
};

// One generation of an alias: an immutable package (or, from the command line, a
// Hugging Face directory) and, while resident, its own serving engine.
struct generation_record {
    explicit generation_record(generation_state initial = generation_state::loading)
        : life_(k_generation_transitions, initial, "generation") {}
    generation_state state() const { return life_.state(); }
    // The one way a generation changes state: an edge missing from the lifecycle
    // table is reported (log, counter, the test/soak handler) and not applied.
    bool transition_to(generation_state next) { return life_.transition_to(next); }

    std::string alias;
    std::uint64_t number = 0;
    std::filesystem::path dir;
    bool cpu = false;
    std::vector<std::uint32_t> chips;
    std::vector<std::uint64_t> bytes;   // bytes per chip of its placement (guard excluded); counted while resident
    std::string reason;                 // why it failed, or how its drain or restore ended
    std::shared_ptr<serving_engine> engine;  // null = not resident
    bool keep = false;                  // stays resident once drained
    std::int64_t admitted = 0;          // requests a counting host (generation_host) admitted, not finished
    double switch_ms = 0, drain_ms = 0; // the driver's time (virtual on the deterministic runtime)
    std::int64_t tail_requests = 0;
    std::chrono::nanoseconds t0{}, drain_since{};

private:
    generation_lifecycle life_;
};

generation_info info_of(const generation_record& g, bool current);

struct generation_alias {
    std::string name;
    std::vector<std::shared_ptr<generation_record>> generations;
    std::shared_ptr<generation_record> current, previous;  // current null: not serving (unloaded, or --replace)
    std::uint64_t next_number = 1;
    std::vector<std::uint32_t> chips;   // models.NAME.chips at start-up, reused by its loads
};
using alias_list = std::vector<std::unique_ptr<generation_alias>>;

struct generation_hooks {
    // A new engine for the generation's directory (the device loads and configures it).
    std::function<result<std::shared_ptr<serving_engine>>(const generation_record&)> configure;
    // True when a draining generation holds no request any more.
    std::function<bool(const generation_record&)> drained;
    // Requests a generation still has when it starts draining (its tail).
    std::function<std::int64_t(const generation_record&)> in_flight;
    // After every switch and unload, under the controller's lock (the router's state file).
    std::function<void(const alias_list&)> mapping_changed;
};

struct generation_options {
    std::chrono::milliseconds step_timeout{120000};   // each warm-up or golden request
    std::chrono::milliseconds drain_timeout{0};        // 0 = none (every request has its own deadline)
    std::chrono::nanoseconds grave_period{std::chrono::seconds(10)};  // models.grave_period_ms
    int restore_attempts = 1;                          // a failed --replace brings the drained one back
    std::chrono::milliseconds restore_backoff{0};      // the pause before attempt n is n times this
    bool one_alias = false;                            // a recordable daemon: loads cannot add an alias
    metrics::calserve_metrics* metrics = nullptr;
};

// models.grave_period_ms: how long a shut-down engine is kept before it is destroyed.
std::chrono::nanoseconds grave_period_of(const config& cfg);

class generation_controller {
public:
    generation_controller(const config& cfg, std::shared_ptr<generation_driver> driver, generation_hooks hooks,
                          generation_options options);
    ~generation_controller();
    generation_controller(const generation_controller&) = delete;
    generation_controller& operator=(const generation_controller&) = delete;

    // Start-up (before any command): configures `g` without the load steps and makes
    // it the serving generation of a new alias; `previous` (from a state file, not
    // resident) is listed before it.
    void_result serve_first(const std::shared_ptr<generation_record>& g, std::vector<std::uint32_t> alias_chips,
                            std::uint64_t next_number, std::shared_ptr<generation_record> previous);

    // Commands (any thread). Errors come before any change; a load's later failure
    // shows in `list`. `load` and a rollback that reloads start the steps and return
    // the generation number at once (the deterministic driver runs the synchronous
    // first step before returning).
    result<std::uint64_t> load(const load_request& request);
    result<std::uint64_t> rollback(const std::string& alias);
    void_result unload(const std::string& alias);

    // Requests of a counting host: the serving generation, counted until `release`.
    std::shared_ptr<generation_record> admit(const std::string& alias);
    void release(const std::shared_ptr<generation_record>& g);

    // Driver thread: drains that ended or timed out, a step past its deadline, the
    // graveyard past its grace period (the worker driver ticks it).
    void housekeeping();
    // Driver thread: a running load fails with `why` (the daemon is stopping).
    void abandon(const std::string& why);

    bool loading() const { return loading_.load(); }
    void wait_idle();                   // blocks until no load runs
    bool has_history() const;           // anything but the start-up generations exists

    // Views (any thread): `f(const alias_list&)` under the lock.
    template <class F>
    auto read(F&& f) const {
        std::lock_guard lock(mutex_);
        return f(aliases_);
    }
    std::vector<generation_info> list() const;

    struct pending;

private:
    result<std::uint64_t> start_load(const std::shared_ptr<generation_record>& g, const load_request& request);
    void start_steps(const std::shared_ptr<generation_record>& g, load_request request);
    void place_and_warm(const std::shared_ptr<generation_record>& g);
    void drain_for_replace(const std::shared_ptr<generation_record>& g, const std::string& plan);
    void after_warm(const std::shared_ptr<generation_record>& g, const actors::generation_result& r);
    void submit_golden(const std::shared_ptr<generation_record>& g);
    void judge(const std::shared_ptr<generation_record>& g);
    void fail(const std::shared_ptr<generation_record>& g, const std::string& why);
    void end_load();
    void restore_previous(const std::string& alias);
    void switch_to(const std::shared_ptr<generation_record>& g, bool keep_old);
    void begin_drain_locked(const std::shared_ptr<generation_record>& g, bool keep);
    void retire(const std::shared_ptr<generation_record>& g, bool timed_out);
    void continue_after_drain(const std::shared_ptr<generation_record>& g);
    void check_deadline(std::chrono::nanoseconds now);
    void bury(std::shared_ptr<serving_engine> engine);
    void post(std::function<void()> step);
    std::function<void(std::function<void()>)> poster() const;
    std::vector<std::uint64_t> resident_bytes_locked(const generation_record* except) const;
    generation_alias* find_locked(std::string_view name) const;
    double ms_since(std::chrono::nanoseconds t) const;

    const config& cfg_;
    std::shared_ptr<generation_driver> driver_;
    generation_hooks hooks_;
    generation_options options_;
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // posted steps and sinks check it
    mutable std::mutex mutex_;          // guards the records below
    alias_list aliases_;                // in start-up order; the first is the primary
    std::vector<std::pair<std::chrono::nanoseconds, std::shared_ptr<serving_engine>>> graveyard_;
    std::atomic<bool> loading_{false};  // a load's steps run (set by the command, cleared at its end)
    std::condition_variable idle_;
    std::shared_ptr<pending> pending_;  // driver thread: the running load's step data
    bool stopping_ = false;             // driver thread: abandon() ran, nothing is restored any more
    std::uint64_t step_requests_ = 0;   // warm-up/golden request ids
};

}  // namespace calserve::engine
