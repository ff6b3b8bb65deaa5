// model_router: start-up (a valid state file's mapping over the command line's models,
// the whole board planned before any device work), housekeeping (drained generations
// retired, shut-down engines buried) and the alias lookups (model_router.hpp).
// Loads, switches and rollbacks are in model_router_generations.cpp, the state file
// in model_router_state.cpp, routing in model_router_engine.cpp.
#include "engine/model_router.hpp"
#include "engine/model_router_internal.hpp"
#include "engine/generation_steps.hpp"

#include <algorithm>
#include <map>
#include <spdlog/spdlog.h>

#include "metrics/metrics.hpp"
#include "engine/serving_engine.hpp"
#include "device/device.hpp"
#include "device/fault_points.hpp"
#include "model/package/placement.hpp"

namespace calserve::actors {

namespace fs = std::filesystem;
namespace pkg = model::package;
using steps::board_chips;
using steps::limits_of;

// A shut-down engine lives this long before it is destroyed (device events still pending).
constexpr auto k_grave_period = std::chrono::seconds(2);

std::string_view to_string(generation_state s) {
    switch (s) {
        case generation_state::loading: return "loading";
        case generation_state::warming: return "warming";
        case generation_state::checking: return "checking";
        case generation_state::serving: return "serving";
        case generation_state::draining: return "draining";
        case generation_state::retired: return "retired";
        case generation_state::failed: return "failed";
    }
    return "?";
}

namespace {

// The state file's mapping by alias, laid over `models`: a saved alias serves its
// current generation's directory, and an alias only the file knows is added. Empty
// when there is no file, or when it is unusable (`note` then says why).
std::map<std::string, saved_alias> restore_mapping(const fs::path& state_file, std::vector<model_spec>& models,
                                                   std::string& note) {
    std::map<std::string, saved_alias> saved;
    if (!state_file.empty() && fs::exists(state_file)) {
        auto state = read_state(state_file);
        if (!state) {
            note = "the state file " + state_file.string() + " is unusable (" + state.error().message +
                   "): serving the command line's models";
            spdlog::error("models: {}", note);
        } else {
            for (auto& s : *state) saved[s.name] = s;
        }
    }
    for (const auto& [name, s] : saved) {
        auto it = std::find_if(models.begin(), models.end(), [&](const model_spec& m) { return m.alias == name; });
        if (it == models.end()) {
            models.push_back(model_spec{name, s.current.dir, false, {}});
        } else {
            it->dir = s.current.dir;
            it->cpu = false;
        }
        spdlog::info("models: '{}' restored to generation {} ({}) from {}", name, s.current.number, s.current.dir,
                     state_file.string());
    }
    return saved;
}

}  // namespace

// --- creation ----------------------------------------------------------------

result<std::unique_ptr<model_router>> model_router::create(runtime& rt, const config& cfg, std::vector<model_spec> models,
                                                           metrics::calserve_metrics* metrics, router_options options) {
    std::unique_ptr<model_router> r(new model_router());
    r->rt_ = &rt;
    r->cfg_ = &cfg;
    r->metrics_ = metrics;
    r->options_ = std::move(options);
    r->faults_ = std::make_shared<device::fault_registry>(std::uint64_t(cfg.integer("device.sim.seed")));
    declare_engine_consumers(*r->faults_);
    if (auto s = r->start(std::move(models)); !s) return s.error();
    r->housekeeper_ = std::thread([p = r.get()] { p->housekeeping(); });
    return r;
}

void_result model_router::start(std::vector<model_spec> models) {
    const auto saved = restore_mapping(options_.state_file, models, state_note_);
    // Plan the whole board before any device work.
    std::vector<pkg::package> packages;
    packages.reserve(models.size());
    std::vector<pkg::placement_request> requests;
    for (const auto& m : models) {
        if (m.cpu) continue;
        auto p = pkg::load_package(m.dir);
        if (!p) return make_error(p.code(), "model '" + m.alias + "': " + p.error().message);
        packages.push_back(std::move(*p));
        requests.push_back({m.alias, &packages.back(), m.chips});
    }
    auto placed = pkg::place_packages(requests, board_chips(*cfg_), limits_of(*cfg_));
    if (!placed.fits)
        return make_error(status::out_of_device_memory, "the models do not fit on the board:\n" + placed.plan);
    std::size_t next_placed = 0;
    for (const auto& m : models) {
        auto a = std::make_unique<alias>();
        a->name = m.alias;
        a->chips = m.chips;
        auto g = std::make_shared<generation>();
        g->alias = m.alias;
        g->dir = m.dir;
        g->cpu = m.cpu;
        if (auto s = saved.find(m.alias); s != saved.end()) {
            g->number = s->second.current.number;
            a->next_number = std::max(s->second.next_number, g->number + 1);
            if (s->second.previous) {
                auto prev = std::make_shared<generation>();
                prev->alias = m.alias;
                prev->number = s->second.previous->number;
                prev->dir = s->second.previous->dir;
                prev->state = generation_state::retired;
                prev->reason = "restored from the state file, not resident";
                a->previous = prev;
                a->generations.push_back(prev);
            }
        } else {
            g->number = a->next_number++;
        }
        if (!m.cpu) {
            g->chips = placed.models[next_placed].chips;
            g->bytes = placed.models[next_placed].bytes;
            ++next_placed;
        }
        auto up = bring_up(g, false);
        if (!up) return make_error(up.code(), "model '" + m.alias + "': " + up.error().message);
        g->state = generation_state::serving;
        a->current = g;
        a->generations.push_back(g);
        if (metrics_) metrics_->model_generation.labels({m.alias}).set(double(g->number));
        spdlog::info("models: '{}' generation {} serving from {} on chip(s) {}", m.alias, g->number, m.dir.string(),
                     [&] { std::string c; for (auto x : g->chips) c += (c.empty() ? "" : ",") + std::to_string(x); return c.empty() ? std::string("-") : c; }());
        aliases_.push_back(std::move(a));
    }
    if (aliases_.empty()) return make_error(status::invalid_argument, "no model to serve");
    card_ = aliases_.front()->current->engine->card();
    return {};
}

model_router::~model_router() {
    stopping_.store(true);
    wake_.notify_all();
    if (worker_.joinable()) worker_.join();
    if (housekeeper_.joinable()) housekeeper_.join();
}

// --- housekeeping ----------------------------------------------------------------

void model_router::retire(generation& g) {
    g.state = generation_state::retired;
    g.drain_ms = std::chrono::duration<double, std::milli>(clock_type::now() - g.drain_since).count();
    spdlog::info("models: '{}' generation {} drained in {:.0f} ms{}", g.alias, g.number, g.drain_ms,
                 g.keep ? " (kept resident)" : "");
    if (g.keep) return;
    g.engine->shutdown();
    auto grave = std::make_shared<generation>(g);
    grave->grave_since = clock_type::now();
    graveyard_.push_back(std::move(grave));
    g.engine = nullptr;
    g.bytes.clear();
}

void model_router::housekeeping() {
    std::unique_lock lock(mutex_);
    while (!stopping_.load()) {
        wake_.wait_for(lock, k_housekeeping_period);
        const auto now = clock_type::now();
        for (auto& a : aliases_) {
            std::int64_t in_flight = 0;
            for (auto& g : a->generations) {
                if (!g->engine) continue;
                in_flight += g->engine->in_flight();
                if (g->state != generation_state::draining) continue;
                const bool idle = g->engine.use_count() == 1 && g->engine->in_flight() == 0;
                if (idle || now - g->drain_since > options_.drain_timeout) {
                    if (!idle) g->reason = "drain timed out with requests in flight";
                    retire(*g);
                    wake_.notify_all();
                }
            }
            if (metrics_) metrics_->model_in_flight.labels({a->name}).set(double(in_flight));
        }
        std::erase_if(graveyard_, [&](const std::shared_ptr<generation>& g) { return now - g->grave_since > k_grave_period; });
    }
}

std::vector<std::uint64_t> model_router::resident_bytes_locked(const generation* except) const {
    std::vector<std::uint64_t> out(board_chips(*cfg_), 0);
    for (const auto& a : aliases_)
        for (const auto& g : a->generations) {
            if (g.get() == except || !g->engine) continue;
            for (std::size_t i = 0; i < g->chips.size() && i < g->bytes.size(); ++i)
                if (g->chips[i] < out.size()) out[g->chips[i]] += g->bytes[i];
        }
    return out;
}

model_router::alias* model_router::find_alias_locked(std::string_view name) {
    for (auto& a : aliases_)
        if (a->name == name) return a.get();
    return nullptr;
}

const model_router::alias* model_router::find_alias_locked(std::string_view name) const {
    for (const auto& a : aliases_)
        if (a->name == name) return a.get();
    return nullptr;
}

}  // namespace calserve::actors
