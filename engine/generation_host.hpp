#pragma once
//! generation_host: release generations of one alias on a deterministic runtime
//! (the recordable daemon, and `calserve replay` of its traces; docs/generations.md).
//!
//! The model router runs a load on a worker thread that blocks on its warm-up and
//! golden requests, and retires drained generations from a housekeeping thread;
//! neither fits a runtime whose every event must come from its inputs. Here the
//! same steps (generation_steps.hpp) run as a step machine on the runtime:
//!
//!   load (an input, applied at its virtual time): validate gates A-F, plan beside
//!     what is resident, configure the candidate engine — synchronously (pure CPU;
//!     in a live daemon it holds the driver for that long)
//!   -> warming: the warm-up request is submitted to the candidate; its sink's
//!      on_finish posts the next step
//!   -> checking: the golden corpus, greedy; the last on_finish posts the verdict
//!   -> serving: the alias switches in that continuation
//!
//! Requests take the generation serving when they are submitted and finish on it;
//! the old generation drains and is retired (unloaded, or kept with `keep`) when
//! its last request finishes — a posted step, never a thread. A failure at any
//! step leaves the serving generation untouched (a `--replace` load's drained
//! generation is brought back). Virtual time stamps every step, so a replay that
//! applies the same inputs at the same times takes the same steps and produces
//! the same message stream.
//!
//! Threads: every call except the read-only ones (`current`, `list`, `in_flight`,
//! `faults`, `card`) runs on the runtime's thread (the realtime driver's, or the
//! replay's); those take the host's mutex briefly. Nothing persists: no state file.
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/model_router.hpp"
#include "engine/serving_engine.hpp"

namespace calserve::actors {

class generation_host {
public:
    // Brings up the first generation (`setup.model_name` is the alias). `faults`
    // null: the host makes the registry every generation shares.
    static result<std::unique_ptr<generation_host>> create(runtime& rt, const config& cfg, engine_setup setup,
                                                           std::chrono::milliseconds step_timeout);
    ~generation_host();
    generation_host(const generation_host&) = delete;
    generation_host& operator=(const generation_host&) = delete;

    // Runtime thread.
    void_result submit(generation_request request, std::shared_ptr<generation_sink> sink);
    void cancel(const std::string& request_id);
    void drain();
    void resume();
    // Generations: as the router's (errors before any change; a load's later failure shows in `list`).
    result<std::uint64_t> load(const load_request& request);
    result<std::uint64_t> rollback(const std::string& alias);
    void_result unload(const std::string& alias);
    // True once anything but the first generation exists (a trace window cannot start then).
    bool has_history() const;
    // True while a load or rollback runs its steps.
    bool loading() const;

    // Any thread.
    std::shared_ptr<serving_engine> current() const;          // null while unloaded
    std::shared_ptr<serving_engine> any_resident() const;     // current, else the newest resident
    std::vector<std::shared_ptr<serving_engine>> resident() const;
    std::vector<generation_info> list() const;
    std::int64_t in_flight() const;
    std::shared_ptr<device::fault_registry> faults() const { return faults_; }
    const model_card& card() const { return card_; }
    const std::string& alias() const { return alias_; }

    struct gen;
    struct pending;

private:
    generation_host(runtime& rt, const config& cfg) : rt_(rt), cfg_(cfg) {}  // keeps a copy of cfg
    result<std::shared_ptr<serving_engine>> configure(const gen& g);
    void start_steps(const std::shared_ptr<gen>& g, const load_request& request);
    void place_and_warm(const std::shared_ptr<gen>& g);
    void after_warm(const std::shared_ptr<gen>& g, const generation_result& r);
    void judge(const std::shared_ptr<gen>& g);
    void fail(const std::shared_ptr<gen>& g, const std::string& why);
    void switch_to(const std::shared_ptr<gen>& g, bool keep_old);
    void begin_drain(const std::shared_ptr<gen>& g, bool keep);
    void finished(const std::shared_ptr<gen>& g);
    void retire(const std::shared_ptr<gen>& g);
    void restore_previous();
    void bury(std::shared_ptr<serving_engine> engine);
    void post(std::function<void()> step);
    std::vector<std::uint64_t> resident_bytes_locked(const gen* except) const;
    double ms_since(std::chrono::nanoseconds t) const;

    runtime& rt_;
    const config cfg_;
    engine_setup setup_;                                  // the first generation's: metrics, faults
    std::chrono::milliseconds step_timeout_{120000};
    std::shared_ptr<device::fault_registry> faults_;
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // posted steps and sinks check it
    std::string alias_;
    model_card card_;
    std::vector<std::uint32_t> chips_;                    // models.ALIAS.chips, reused by its loads
    mutable std::mutex mutex_;                            // guards the records below for other threads
    std::vector<std::shared_ptr<gen>> generations_;
    std::shared_ptr<gen> current_, previous_;
    std::uint64_t next_number_ = 1;
    std::shared_ptr<pending> loading_;                    // the load whose steps run, if any
    std::vector<std::pair<std::chrono::nanoseconds, std::shared_ptr<serving_engine>>> graveyard_;
    std::uint64_t step_requests_ = 0;                     // warm-up/golden request ids
};

}  // namespace calserve::actors
