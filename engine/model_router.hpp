#pragma once
//! model_router: several models on one board, and release generations of each
//! (docs/generations.md; document 004 G10, document 002 C3).
//!
//! An *alias* is the name clients send as `model`; it points at one *generation*
//! (an immutable package loaded as its own serving_engine on its own chips) at a
//! time. `load` brings a new generation up beside the serving one on a worker
//! thread, step by step, each bounded by a timeout:
//!
//!   loading (validate gates A-F, plan beside what is resident, configure)
//!     -> warming (one request through the whole serving path)
//!     -> checking (the package's golden corpus, greedy, against its tokens)
//!     -> serving (the alias switches, under the router's lock)
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
//! Threads: `route`/`models`/`list` take the router's mutex briefly; loads run on
//! one worker thread at a time; a housekeeping thread retires drained generations.
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <optional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/engine.hpp"
#include "config/config.hpp"

namespace calserve::metrics {
struct calserve_metrics;
}

namespace calserve::device {
class fault_registry;
}

namespace calserve::actors {

class runtime;
class serving_engine;

enum class generation_state : std::uint8_t { loading, warming, checking, serving, draining, retired, failed };
std::string_view to_string(generation_state s);

// One model the daemon serves from the start (the command line).
struct model_spec {
    std::string alias;
    std::filesystem::path dir;     // calbin package (sim) or Hugging Face directory (cpu)
    bool cpu = false;
    std::vector<std::uint32_t> chips;  // empty = first fit (models.NAME.chips)
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

// One `model list` row from a generation record: the router's and a recordable
// daemon's generation_host keep the same fields under the same names.
template <class Generation>
generation_info info_of(const std::string& alias, const Generation& g, bool current) {
    generation_info i;
    i.alias = alias;
    i.generation = g.number;
    i.dir = g.dir.string();
    i.state = std::string(to_string(g.state));
    i.reason = g.reason;
    i.chips = g.chips;
    i.resident = g.engine != nullptr;
    i.current = current;
    i.in_flight = g.engine ? g.engine->in_flight() : 0;
    i.switch_ms = g.switch_ms;
    i.drain_ms = g.drain_ms;
    i.tail_requests = g.tail_requests;
    return i;
}

struct load_request {
    std::string alias;
    std::filesystem::path dir;
    bool replace = false;               // drain the serving generation first when both do not fit
    bool keep = false;                  // keep the old generation resident after the switch
};

struct router_options {
    std::filesystem::path state_file;   // empty = no persistence
    std::chrono::milliseconds step_timeout{120000};
    std::chrono::milliseconds drain_timeout{600000};
};

class model_router final : public engine {
public:
    // Places `models` on the board (exit-2 material when they do not fit: the error
    // carries the per-chip plan) and brings each up. A valid state file overrides the
    // command line's directory of an alias and adds its other aliases.
    static result<std::unique_ptr<model_router>> create(runtime& rt, const config& cfg, std::vector<model_spec> models,
                                                        metrics::calserve_metrics* metrics, router_options options);
    ~model_router() override;

    // engine: routing and the board-wide view.
    result<std::shared_ptr<engine>> route(std::string_view model) override;
    std::vector<model_card> models() const override;
    void_result submit(generation_request request, std::shared_ptr<generation_sink> sink) override;
    void cancel(const std::string& request_id) override;
    const model_card& card() const override;
    engine_health health() const override;
    result<std::vector<token_id>> encode(std::string_view text) const override;
    result<std::vector<token_id>> encode_prompt(std::string_view text, std::int64_t max_tokens) const override;
    result<std::string> decode(const std::vector<token_id>& ids) const override;
    result<std::string> apply_chat_template(const std::vector<chat_message>& messages,
                                            const chat_options& options) const override;
    result<std::shared_ptr<const model::grammar::compiled>> compile_grammar(model::grammar::grammar_kind kind,
                                                                           std::string_view text) const override;
    void drain() override;
    void resume() override;
    std::int64_t in_flight() const override;

    // Generations (control socket `model.*`). `load` and `rollback` start the work
    // and return at once with the generation number; `list` shows its progress.
    result<std::uint64_t> load(const load_request& request);
    result<std::uint64_t> rollback(const std::string& alias);
    void_result unload(const std::string& alias);
    std::vector<generation_info> list() const;
    // What start-up found in the state file ("" = fine or none).
    const std::string& state_note() const { return state_note_; }
    // Blocks until no load runs (tests, shutdown).
    void wait_idle();

    // The engine of the first alias' serving generation (console, control stats,
    // faults, dead-device watch); null while it has none.
    std::shared_ptr<serving_engine> primary() const;
    std::shared_ptr<device::fault_registry> faults() const { return faults_; }
    std::optional<std::uint64_t> sequence_of(const std::string& request_id) const;

    struct generation;
    struct alias;

private:
    model_router() = default;
    void_result start(std::vector<model_spec> models);
    result<std::shared_ptr<generation>> bring_up(const std::shared_ptr<generation>& g, bool check_golden);
    void run_load(std::shared_ptr<generation> g, load_request request, std::chrono::steady_clock::time_point t0);
    void_result wait_drained(const std::shared_ptr<generation>& g);
    void restore_previous(const std::string& alias);
    void switch_to(const std::string& alias, const std::shared_ptr<generation>& g, bool keep_old);
    void housekeeping();
    void retire(generation& g);
    void persist_locked();
    std::vector<std::uint64_t> resident_bytes_locked(const generation* except) const;
    alias* find_alias_locked(std::string_view name);
    const alias* find_alias_locked(std::string_view name) const;
    std::shared_ptr<serving_engine> any_engine() const;
    void start_worker(std::function<void()> job);

    runtime* rt_ = nullptr;
    const config* cfg_ = nullptr;
    metrics::calserve_metrics* metrics_ = nullptr;
    router_options options_;
    std::shared_ptr<device::fault_registry> faults_;
    mutable std::mutex mutex_;
    std::vector<std::unique_ptr<alias>> aliases_;       // in start-up order; the first is primary
    std::vector<std::shared_ptr<generation>> graveyard_;  // shut down, destroyed after a grace period
    model_card card_;                                    // the primary's card, or the first alias's
    std::string state_note_;
    std::atomic<bool> accepting_{true};
    std::atomic<bool> stopping_{false};
    std::thread worker_;                                 // the running load, if any
    std::atomic<bool> loading_{false};
    std::thread housekeeper_;
    std::condition_variable wake_;
};

}  // namespace calserve::actors
