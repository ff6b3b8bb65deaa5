#pragma once
//! generation_host: release generations of one alias on a deterministic runtime
//! (the recordable daemon, and `calserve replay` of its traces; docs/generations.md).
//!
//! The generations themselves (records, the load's step machine, switch, drain,
//! rollback, unload, graveyard) are the generation_controller's, shared with the
//! model router. This host drives it with the runtime_driver: a load's first step
//! (validate, plan, configure) runs at once on the runtime's thread, the warm-up and
//! golden requests are ordinary requests on the same runtime, and each later step is
//! a posted continuation, so a replay that applies the same inputs at the same
//! virtual times takes the same steps and produces the same message stream.
//!
//! Requests take the generation serving when they are submitted and finish on it;
//! the host counts them (`admit`/`release`), and a draining generation retires when
//! its count reaches zero — a posted step, never a thread. There is no drain timeout
//! (every request has its own deadline) and a failed --replace restores once.
//!
//! Threads: every call except the read-only ones (`current`, `list`, `in_flight`,
//! `faults`, `card`) runs on the runtime's thread (the realtime driver's, or the
//! replay's); those take the controller's mutex briefly. Nothing persists.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/generation_controller.hpp"
#include "engine/model_router.hpp"
#include "engine/serving_engine.hpp"

namespace calserve::engine {

class generation_host {
public:
    // Brings up the first generation (`setup.model_name` is the alias). `faults`
    // null: the host makes the registry every generation shares.
    static result<std::unique_ptr<generation_host>> create(actors::runtime& rt, const config& cfg, engine_setup setup,
                                                           std::chrono::milliseconds step_timeout);
    ~generation_host();
    generation_host(const generation_host&) = delete;
    generation_host& operator=(const generation_host&) = delete;

    // Runtime thread.
    void_result submit(actors::generation_request request, std::shared_ptr<actors::generation_sink> sink);
    void cancel(const std::string& request_id);
    void drain();
    void resume();
    // Generations: as the router's (errors before any change; a load's later failure shows in `list`).
    result<std::uint64_t> load(const load_request& request) { return controller_->load(request); }
    result<std::uint64_t> rollback(const std::string& alias) { return controller_->rollback(alias); }
    void_result unload(const std::string& alias) { return controller_->unload(alias); }
    // True once anything but the first generation exists (a trace window cannot start then).
    bool has_history() const { return controller_->has_history(); }
    // True while a load or rollback runs its steps.
    bool loading() const { return controller_->loading(); }

    // Any thread.
    std::shared_ptr<serving_engine> current() const;          // null while unloaded
    std::shared_ptr<serving_engine> any_resident() const;     // current, else the newest resident
    std::vector<std::shared_ptr<serving_engine>> resident() const;
    std::vector<generation_info> list() const { return controller_->list(); }
    std::int64_t in_flight() const;
    std::shared_ptr<device::fault_registry> faults() const { return faults_; }
    const actors::model_card& card() const { return card_; }
    const std::string& alias() const { return alias_; }

private:
    generation_host(actors::runtime& rt, const config& cfg) : rt_(rt), cfg_(cfg) {}  // keeps a copy of cfg
    result<std::shared_ptr<serving_engine>> configure(const generation_record& g);

    actors::runtime& rt_;
    const config cfg_;
    engine_setup setup_;                                  // the first generation's: metrics, faults
    std::shared_ptr<device::fault_registry> faults_;
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // request sinks check it
    std::string alias_;
    actors::model_card card_;
    std::unique_ptr<generation_controller> controller_;
};

}  // namespace calserve::engine
