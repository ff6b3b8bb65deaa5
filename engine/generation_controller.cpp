// generation_controller: the records, the commands, the switch, the drain and the
// graveyard (generation_controller.hpp). A load's steps are in generation_load.cpp.
#include "engine/generation_controller.hpp"

#include <algorithm>
#include <spdlog/spdlog.h>

#include "engine/generation_driver.hpp"
#include "engine/generation_steps.hpp"
#include "engine/serving_engine.hpp"
#include "metrics/metrics.hpp"

namespace calserve::engine {

namespace fs = std::filesystem;
using std::chrono::nanoseconds;

namespace {
// Shut-down engines kept at most (the oldest go first, even within their grace period).
constexpr std::size_t k_max_graveyard = 16;
}  // namespace

generation_info info_of(const generation_record& g, bool current) {
    generation_info i;
    i.alias = g.alias;
    i.generation = g.number;
    i.dir = g.dir.string();
    i.state = std::string(to_string(g.state()));
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

std::chrono::nanoseconds grave_period_of(const config& cfg) {
    return std::chrono::milliseconds(cfg.integer("models.grave_period_ms"));
}

generation_controller::generation_controller(const config& cfg, std::shared_ptr<generation_driver> driver,
                                             generation_hooks hooks, generation_options options)
    : cfg_(cfg), driver_(std::move(driver)), hooks_(std::move(hooks)), options_(options) {}

generation_controller::~generation_controller() { *alive_ = false; }

void generation_controller::post(std::function<void()> step) {
    driver_->post([alive = std::weak_ptr<bool>(alive_), step = std::move(step)] {
        if (auto a = alive.lock(); a && *a) step();
    });
}

double generation_controller::ms_since(std::chrono::nanoseconds t) const {
    return std::chrono::duration<double, std::milli>(driver_->now() - t).count();
}

generation_alias* generation_controller::find_locked(std::string_view name) const {
    for (const auto& a : aliases_)
        if (a->name == name) return a.get();
    return nullptr;
}

void_result generation_controller::serve_first(const std::shared_ptr<generation_record>& g, std::vector<std::uint32_t> alias_chips,
                                               std::uint64_t next_number, std::shared_ptr<generation_record> previous) {
    auto e = hooks_.configure(*g);
    if (!e) return e.error();
    g->engine = std::move(*e);
    g->transition_to(generation_state::serving);
    auto a = std::make_unique<generation_alias>();
    a->name = g->alias;
    a->chips = std::move(alias_chips);
    a->next_number = next_number;
    if (previous) a->generations.push_back(previous);
    a->previous = std::move(previous);
    a->current = g;
    a->generations.push_back(g);
    if (options_.metrics) options_.metrics->model_generation.labels({g->alias}).set(double(g->number));
    std::lock_guard lock(mutex_);
    aliases_.push_back(std::move(a));
    return {};
}

// --- commands --------------------------------------------------------------------

result<std::uint64_t> generation_controller::load(const load_request& request) {
    if (auto c = steps::check_load(request.alias, request.dir); !c) return c.error();
    std::shared_ptr<generation_record> g;
    {
        std::lock_guard lock(mutex_);
        auto* a = find_locked(request.alias);
        if (!a && options_.one_alias)
            return make_error(status::invalid_argument, "model load: a recordable daemon serves one alias ('" +
                                                            aliases_.front()->name + "'); it cannot add '" +
                                                            request.alias + "'");
        if (loading_.exchange(true))
            return make_error(status::overloaded, "model load: another load is running; retry when it ends");
        if (!a) {
            aliases_.push_back(std::make_unique<generation_alias>());
            a = aliases_.back().get();
            a->name = request.alias;
        }
        g = std::make_shared<generation_record>();
        g->alias = request.alias;
        g->number = a->next_number++;
        g->dir = fs::absolute(request.dir);
        g->keep = request.keep;
        a->generations.push_back(g);
    }
    return start_load(g, request);
}

result<std::uint64_t> generation_controller::rollback(const std::string& name) {
    std::shared_ptr<generation_record> prev;
    bool instant = false;  // resident: the alias points back without the load steps
    {
        std::lock_guard lock(mutex_);
        auto* a = find_locked(name);
        if (!a) return make_error(status::not_found, "model rollback: no alias '" + name + "'");
        if (!a->previous) return make_error(status::not_found, "model rollback: '" + name + "' has no previous generation");
        prev = a->previous;
        instant = prev->engine &&
                  (prev->state() == generation_state::retired || prev->state() == generation_state::draining);
        if (instant) prev->switch_ms = 0;
    }
    if (instant) {
        switch_to(prev, true);  // instant: the generation it leaves stays resident too
        return prev->number;
    }
    if (loading_.exchange(true)) return make_error(status::overloaded, "model rollback: a load is running; retry when it ends");
    {
        std::lock_guard lock(mutex_);
        prev->transition_to(generation_state::loading);
        prev->reason.clear();
    }
    return start_load(prev, load_request{name, prev->dir, false, false});
}

result<std::uint64_t> generation_controller::start_load(const std::shared_ptr<generation_record>& g, const load_request& request) {
    {
        std::lock_guard lock(mutex_);
        g->t0 = driver_->now();
    }
    driver_->enter([this, g, request, alive = std::weak_ptr<bool>(alive_)] {
        if (auto a = alive.lock(); a && *a) start_steps(g, request);
    });
    return g->number;
}

void_result generation_controller::unload(const std::string& name) {
    std::shared_ptr<generation_record> old;
    {
        std::lock_guard lock(mutex_);
        auto* a = find_locked(name);
        if (!a || !a->current) return make_error(status::not_found, "model unload: no serving alias '" + name + "'");
        old = a->current;
        a->current = nullptr;
        a->previous = old;
        begin_drain_locked(old, false);
        if (hooks_.mapping_changed) hooks_.mapping_changed(aliases_);
    }
    spdlog::info("models: '{}' unloaded (generation {} drains)", name, old->number);
    return {};
}

void generation_controller::wait_idle() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return !loading_.load(); });
}

void generation_controller::end_load() {
    pending_.reset();
    {
        std::lock_guard lock(mutex_);
        loading_.store(false);
    }
    idle_.notify_all();
}

// --- requests of a counting host -------------------------------------------------

std::shared_ptr<generation_record> generation_controller::admit(const std::string& alias) {
    std::lock_guard lock(mutex_);
    auto* a = find_locked(alias);
    if (!a || !a->current) return nullptr;
    ++a->current->admitted;
    return a->current;
}

void generation_controller::release(const std::shared_ptr<generation_record>& g) {
    bool drained = false;
    {
        std::lock_guard lock(mutex_);
        drained = --g->admitted == 0 && g->state() == generation_state::draining;
    }
    if (drained) post([this, g] { retire(g, false); });
}

// --- switch, drain, retire -------------------------------------------------------

void generation_controller::switch_to(const std::shared_ptr<generation_record>& g, bool keep_old) {
    std::shared_ptr<generation_record> old;
    std::shared_ptr<serving_engine> displaced;
    {
        std::lock_guard lock(mutex_);
        auto* a = find_locked(g->alias);
        if (!a) return;
        old = a->current;
        if (old == g) return;
        if (a->previous == g) a->previous = nullptr;  // a rollback: what it leaves becomes the previous
        a->current = g;
        g->transition_to(generation_state::serving);
        g->reason.clear();
        if (old) {
            // The generation rollback would have gone to is replaced by `old`: unloaded if kept resident.
            if (auto p = a->previous; p && p != g && p->engine && p->state() == generation_state::retired) {
                p->keep = false;
                displaced = std::move(p->engine);
            }
            a->previous = old;
        }
        if (hooks_.mapping_changed) hooks_.mapping_changed(aliases_);
    }
    bury(std::move(displaced));
    if (auto* m = options_.metrics) {
        m->model_generation.labels({g->alias}).set(double(g->number));
        m->model_switches_total.labels({g->alias}).inc();
    }
    spdlog::info("models: '{}' switched to generation {} ({} ms after the command){}", g->alias, g->number, g->switch_ms,
                 old ? "; generation " + std::to_string(old->number) + " drains" : std::string());
    if (!old) return;
    std::lock_guard lock(mutex_);
    begin_drain_locked(old, keep_old);
}

// Requests it admitted finish on it; none arrive (it is no alias' current).
void generation_controller::begin_drain_locked(const std::shared_ptr<generation_record>& g, bool keep) {
    g->transition_to(generation_state::draining);
    g->keep = keep;
    g->drain_since = driver_->now();
    g->tail_requests = hooks_.in_flight(*g);
    if (hooks_.drained(*g)) post([this, g] { retire(g, false); });
}

void generation_controller::retire(const std::shared_ptr<generation_record>& g, bool timed_out) {
    std::shared_ptr<serving_engine> unloaded;
    {
        std::lock_guard lock(mutex_);
        if (g->state() != generation_state::draining) return;  // switched back meanwhile
        if (!timed_out && !hooks_.drained(*g)) return;
        if (timed_out) g->reason = "drain timed out with requests in flight";
        g->transition_to(generation_state::retired);
        g->drain_ms = ms_since(g->drain_since);
        if (!g->keep) {
            unloaded = std::move(g->engine);   // its bytes stay: a restore brings it back where it was
        }
    }
    spdlog::info("models: '{}' generation {} drained in {:.0f} ms{}", g->alias, g->number, g->drain_ms,
                 g->keep ? " (kept resident)" : "");
    bury(std::move(unloaded));
    continue_after_drain(g);
}

// A shut-down engine waits out the grace period (device events of it may still be
// pending) before it is destroyed: at a later burial or housekeeping tick.
void generation_controller::bury(std::shared_ptr<serving_engine> engine) {
    if (!engine) return;
    engine->shutdown();
    const auto now = driver_->now();
    std::lock_guard lock(mutex_);
    std::erase_if(graveyard_, [&](const auto& e) { return now - e.first > options_.grave_period; });
    if (graveyard_.size() >= k_max_graveyard) graveyard_.erase(graveyard_.begin());
    graveyard_.emplace_back(now, std::move(engine));
}

void generation_controller::housekeeping() {
    const auto now = driver_->now();
    std::vector<std::pair<std::shared_ptr<generation_record>, bool>> done;
    std::vector<std::shared_ptr<serving_engine>> expired;
    {
        std::lock_guard lock(mutex_);
        for (const auto& a : aliases_)
            for (const auto& g : a->generations) {
                if (!g->engine || g->state() != generation_state::draining) continue;
                const bool timed_out = options_.drain_timeout.count() > 0 && now - g->drain_since > options_.drain_timeout;
                if (hooks_.drained(*g) || timed_out) done.emplace_back(g, !hooks_.drained(*g));
            }
        for (auto& [t, e] : graveyard_)
            if (now - t > options_.grave_period) expired.push_back(std::move(e));
        std::erase_if(graveyard_, [](const auto& e) { return !e.second; });
    }
    for (auto& [g, timed_out] : done) retire(g, timed_out);
    check_deadline(now);
}

// --- views -------------------------------------------------------------------------

bool generation_controller::has_history() const {
    std::lock_guard lock(mutex_);
    for (const auto& a : aliases_)
        if (a->generations.size() > 1) return true;
    return false;
}

std::vector<generation_info> generation_controller::list() const {
    std::lock_guard lock(mutex_);
    std::vector<generation_info> out;
    for (const auto& a : aliases_)
        for (const auto& g : a->generations) out.push_back(info_of(*g, g == a->current));
    return out;
}

std::vector<std::uint64_t> generation_controller::resident_bytes_locked(const generation_record* except) const {
    std::vector<std::uint64_t> out(steps::board_chips(cfg_), 0);
    for (const auto& a : aliases_)
        for (const auto& g : a->generations) {
            if (g.get() == except || !g->engine) continue;
            for (std::size_t i = 0; i < g->chips.size() && i < g->bytes.size(); ++i)
                if (g->chips[i] < out.size()) out[g->chips[i]] += g->bytes[i];
        }
    return out;
}

}  // namespace calserve::engine
