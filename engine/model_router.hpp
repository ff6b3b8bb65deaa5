#pragma once
//! model_router: several models on one board, and release generations of each
//! (docs/generations.md; document 004 G10, document 002 C3).
//!
//! An *alias* is the name clients send as `model`; it points at one *generation*
//! (an immutable package loaded as its own serving_engine on its own chips) at a
//! time. `load` brings a new generation up beside the serving one on the worker
//! driver's thread, step by step, each bounded by a timeout:
//!
//!   loading (validate gates A-F, plan beside what is resident, configure)
//!     -> warming (one request through the whole serving path)
//!     -> checking (the package's golden corpus, greedy, against its tokens)
//!     -> serving (the alias switches, under the controller's lock)
//!
//! Requests routed before the switch hold their generation (`route` hands out the
//! engine by shared_ptr) and finish on it; requests after it go to the new one.
//! The old generation drains, then is unloaded (or kept resident with `keep`, so
//! that `rollback` is instant). A failure at any step leaves the serving
//! generation untouched: the candidate becomes `failed` with its reason.
//!
//! The mapping (alias -> current and previous generation) persists in
//! `<server.state_dir>/models.json`, written atomically and checksummed; on start
//! the daemon serves it, or, when the file is torn or corrupt, the command line's
//! packages, saying so.
//!
//! The generations themselves (records, the load's step machine, switch, drain,
//! rollback, unload, graveyard) are the generation_controller's, shared with the
//! recordable daemon's generation_host; the router drives it with a worker_driver.
//!
//! Threads: `route`/`models`/`list` take the controller's mutex briefly; a load's
//! steps, drained generations' retirement and the graveyard run on the worker
//! driver's one thread.
#include <atomic>
#include <filesystem>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "engine/text_forwarding_engine.hpp"
#include "config/config.hpp"
#include "engine/generation_controller.hpp"
#include "engine/generation_driver.hpp"

namespace calserve::metrics {
struct calserve_metrics;
}

namespace calserve::device {
class fault_registry;
}

namespace calserve::actors {
class runtime;
}  // namespace calserve::actors

namespace calserve::engine {

class serving_engine;

// One model the daemon serves from the start (the command line).
struct model_spec {
    std::string alias;
    std::filesystem::path dir;     // calbin package (sim) or Hugging Face directory (cpu)
    bool cpu = false;
    std::vector<std::uint32_t> chips;  // empty = first fit (models.NAME.chips)
};

struct router_options {
    std::filesystem::path state_file;   // empty = no persistence
    std::chrono::milliseconds step_timeout{120000};
    std::chrono::milliseconds drain_timeout{600000};
};

// A restore after a failed --replace: tries, and the growing pause between them.
inline constexpr int k_restore_attempts = 5;
inline constexpr auto k_restore_backoff = std::chrono::milliseconds(500);

class model_router final : public text_forwarding_engine {
public:
    // Places `models` on the board (exit-2 material when they do not fit: the error
    // carries the per-chip plan) and brings each up. A valid state file overrides the
    // command line's directory of an alias and adds its other aliases.
    static result<std::unique_ptr<model_router>> create(actors::runtime& rt, const config& cfg, std::vector<model_spec> models,
                                                        metrics::calserve_metrics* metrics, router_options options);
    ~model_router() override;

    // engine: routing and the board-wide view.
    result<std::shared_ptr<actors::engine>> route(std::string_view model) override;
    std::vector<actors::model_card> models() const override;
    void_result submit(actors::generation_request request, std::shared_ptr<actors::generation_sink> sink) override;
    void cancel(const std::string& request_id) override;
    const actors::model_card& card() const override;
    actors::engine_health health() const override;
    void drain() override;
    void resume() override;
    std::int64_t in_flight() const override;

    // Generations (control socket `model.*`). `load` and `rollback` start the work
    // and return at once with the generation number; `list` shows its progress.
    result<std::uint64_t> load(const load_request& request) { return controller_->load(request); }
    result<std::uint64_t> rollback(const std::string& alias) { return controller_->rollback(alias); }
    void_result unload(const std::string& alias) { return controller_->unload(alias); }
    std::vector<generation_info> list() const { return controller_->list(); }
    // What start-up found in the state file ("" = fine or none).
    const std::string& state_note() const { return state_note_; }
    // Blocks until no load runs (tests, shutdown).
    void wait_idle() { controller_->wait_idle(); }

    // The engine of the first alias' serving generation (console, control stats,
    // faults, dead-device watch); null while it has none.
    std::shared_ptr<serving_engine> primary() const;
    std::shared_ptr<device::fault_registry> faults() const { return faults_; }
    std::optional<std::uint64_t> sequence_of(const std::string& request_id) const;

private:
    model_router() = default;
    void_result start(std::vector<model_spec> models);
    result<std::shared_ptr<serving_engine>> configure(const generation_record& g);
    void housekeeping();
    void persist(const alias_list& aliases) const;
    std::vector<std::shared_ptr<serving_engine>> resident() const;
    std::shared_ptr<const actors::engine> text_engine() const override;

    actors::runtime* rt_ = nullptr;
    const config* cfg_ = nullptr;
    metrics::calserve_metrics* metrics_ = nullptr;
    router_options options_;
    std::shared_ptr<device::fault_registry> faults_;
    std::shared_ptr<worker_driver> driver_;              // runs the steps and the housekeeping
    std::unique_ptr<generation_controller> controller_;  // every alias and its generations
    actors::model_card card_;                                    // the primary's card, or the first alias's
    std::string state_note_;
    std::atomic<bool> accepting_{true};
};

}  // namespace calserve::engine
