// model_router: start-up (a valid state file's mapping over the command line's models,
// the whole board planned before any device work), the hooks it gives the
// generation_controller and its worker driver's housekeeping (model_router.hpp).
// Loads, switches and rollbacks are the controller's (generation_controller.hpp), the
// state file is in model_router_state.cpp, routing in model_router_engine.cpp.
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

namespace calserve::engine {

namespace fs = std::filesystem;
namespace pkg = model::package;
using steps::board_chips;
using steps::limits_of;

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

result<std::unique_ptr<model_router>> model_router::create(actors::runtime& rt, const config& cfg, std::vector<model_spec> models,
                                                           metrics::calserve_metrics* metrics, router_options options) {
    std::unique_ptr<model_router> r(new model_router());
    r->rt_ = &rt;
    r->cfg_ = &cfg;
    r->metrics_ = metrics;
    r->options_ = std::move(options);
    r->faults_ = std::make_shared<device::fault_registry>(std::uint64_t(cfg.integer("device.sim.seed")));
    declare_engine_consumers(*r->faults_);
    generation_hooks hooks;
    hooks.configure = [p = r.get()](const generation_record& g) { return p->configure(g); };
    // Idle: no routed request holds its engine (route hands it out by shared_ptr) and none is in flight.
    hooks.drained = [](const generation_record& g) {
        return !g.engine || (g.engine.use_count() == 1 && g.engine->in_flight() == 0);
    };
    hooks.in_flight = [](const generation_record& g) { return g.engine ? g.engine->in_flight() : 0; };
    hooks.mapping_changed = [p = r.get()](const alias_list& aliases) { p->persist(aliases); };
    generation_options go;
    go.step_timeout = r->options_.step_timeout;
    go.drain_timeout = r->options_.drain_timeout;
    go.grave_period = grave_period_of(cfg);
    go.restore_attempts = k_restore_attempts;
    go.restore_backoff = k_restore_backoff;
    go.metrics = metrics;
    r->driver_ = std::make_shared<worker_driver>();
    r->controller_ = std::make_unique<generation_controller>(cfg, r->driver_, std::move(hooks), go);
    if (auto s = r->start(std::move(models)); !s) return s.error();
    r->driver_->start([p = r.get()] { p->housekeeping(); });
    return r;
}

result<std::shared_ptr<serving_engine>> model_router::configure(const generation_record& g) {
    engine_setup setup;
    (g.cpu ? setup.model_dir : setup.package_dir) = g.dir;
    setup.model_name = g.alias;
    setup.metrics = metrics_;
    setup.faults = faults_;
    auto e = serving_engine::create(*rt_, *cfg_, setup);
    if (!e) return e.error();
    return std::shared_ptr<serving_engine>(std::move(*e));
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
        auto g = std::make_shared<generation_record>();
        g->alias = m.alias;
        g->dir = m.dir;
        g->cpu = m.cpu;
        std::uint64_t next_number = 1;
        std::shared_ptr<generation_record> prev;
        if (auto s = saved.find(m.alias); s != saved.end()) {
            g->number = s->second.current.number;
            next_number = std::max(s->second.next_number, g->number + 1);
            if (s->second.previous) {
                prev = std::make_shared<generation_record>(generation_state::retired);
                prev->alias = m.alias;
                prev->number = s->second.previous->number;
                prev->dir = s->second.previous->dir;
                prev->reason = "restored from the state file, not resident";
            }
        } else {
            g->number = next_number++;
        }
        if (!m.cpu) {
            g->chips = placed.models[next_placed].chips;
            g->bytes = placed.models[next_placed].bytes;
            ++next_placed;
        }
        if (auto up = controller_->serve_first(g, m.chips, next_number, prev); !up)
            return make_error(up.code(), "model '" + m.alias + "': " + up.error().message);
        spdlog::info("models: '{}' generation {} serving from {} on chip(s) {}", m.alias, g->number, m.dir.string(),
                     [&] { std::string c; for (auto x : g->chips) c += (c.empty() ? "" : ",") + std::to_string(x); return c.empty() ? std::string("-") : c; }());
    }
    if (models.empty()) return make_error(status::invalid_argument, "no model to serve");
    card_ = controller_->read([](const alias_list& aliases) { return aliases.front()->current->engine->card(); });
    return {};
}

model_router::~model_router() {
    // A load still running fails (its candidate is shut down) on the driver's thread, which then ends.
    driver_->stop([c = controller_.get()] { c->abandon("the daemon is stopping"); });
}

// --- housekeeping ----------------------------------------------------------------

// The worker driver's tick: drains, step deadlines and the graveyard, then each alias' requests in flight.
void model_router::housekeeping() {
    controller_->housekeeping();
    if (!metrics_) return;
    auto counts = controller_->read([](const alias_list& aliases) {
        std::vector<std::pair<std::string, std::int64_t>> out;
        for (const auto& a : aliases) {
            std::int64_t n = 0;
            for (const auto& g : a->generations)
                if (g->engine) n += g->engine->in_flight();
            out.emplace_back(a->name, n);
        }
        return out;
    });
    for (const auto& [name, n] : counts) metrics_->model_in_flight.labels({name}).set(double(n));
}

}  // namespace calserve::engine
