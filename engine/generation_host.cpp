// generation_host: one alias' generations on a deterministic runtime (generation_host.hpp).
#include "engine/generation_host.hpp"

#include "config/invariant.hpp"
#include "engine/generation_driver.hpp"
#include "engine/generation_steps.hpp"
#include "actors/runtime/runtime.hpp"
#include "device/fault_points.hpp"
#include "model/package/package.hpp"

namespace calserve::engine {

namespace {

// A client request's sink: counts the request on its generation until it finishes.
struct counted_sink final : actors::generation_sink {
    std::shared_ptr<actors::generation_sink> inner;
    std::function<void()> finished;
    void on_token(const actors::generated_token& t) override { inner->on_token(t); }
    void on_finish(const actors::generation_result& r) override {
        inner->on_finish(r);
        finished();
    }
};

}  // namespace

result<std::unique_ptr<generation_host>> generation_host::create(actors::runtime& rt, const config& cfg, engine_setup setup,
                                                                 std::chrono::milliseconds step_timeout) {
    std::unique_ptr<generation_host> h(new generation_host(rt, cfg));
    h->faults_ = setup.faults;
    if (!h->faults_) {
        h->faults_ = std::make_shared<device::fault_registry>(std::uint64_t(cfg.integer("device.sim.seed")));
        declare_engine_consumers(*h->faults_);
    }
    setup.faults = h->faults_;
    h->setup_ = setup;
    generation_hooks hooks;
    hooks.configure = [p = h.get()](const generation_record& g) { return p->configure(g); };
    hooks.drained = [](const generation_record& g) { return g.admitted == 0; };
    hooks.in_flight = [](const generation_record& g) { return g.admitted; };
    generation_options options;
    options.step_timeout = step_timeout;
    options.grave_period = grave_period_of(h->cfg_);
    options.one_alias = true;
    options.metrics = setup.metrics;
    h->controller_ = std::make_unique<generation_controller>(h->cfg_, std::make_shared<runtime_driver>(rt),
                                                             std::move(hooks), options);
    auto g = std::make_shared<generation_record>();
    g->number = 1;
    g->cpu = setup.package_dir.empty();
    g->dir = g->cpu ? setup.model_dir : setup.package_dir;
    // The alias is the engine's card name (serving_engine: the model name, else the directory's).
    g->alias = setup.model_name.empty() ? g->dir.filename().string() : setup.model_name;
    if (!g->cpu) {  // where it sits, so that loads plan beside it
        if (auto p = model::package::load_package(g->dir)) {
            auto placed = steps::place_beside(setup.model_name, *p, {}, cfg, {});
            if (placed.fits) g->chips = placed.models[0].chips, g->bytes = placed.models[0].bytes;
        }
    }
    if (auto s = h->controller_->serve_first(g, {}, 2, nullptr); !s) return s.error();
    h->card_ = g->engine->card();
    h->alias_ = h->card_.name;
    CALSERVE_INVARIANT(h->alias_ == g->alias, "generation_host: the alias is the engine's card name");
    return h;
}

generation_host::~generation_host() {
    *alive_ = false;
    controller_.reset();
}

result<std::shared_ptr<serving_engine>> generation_host::configure(const generation_record& g) {
    engine_setup s = setup_;
    s.package_dir.clear();
    s.model_dir.clear();
    (g.cpu ? s.model_dir : s.package_dir) = g.dir;
    if (!alias_.empty()) s.model_name = alias_;
    auto e = serving_engine::create(rt_, cfg_, s);
    if (!e) return e.error();
    return std::shared_ptr<serving_engine>(std::move(*e));
}

// --- requests ------------------------------------------------------------------

void_result generation_host::submit(actors::generation_request request, std::shared_ptr<actors::generation_sink> sink) {
    auto g = controller_->admit(alias_);
    if (!g) return make_error(status::not_ready, "model '" + alias_ + "' has no serving generation now");
    auto counted = std::make_shared<counted_sink>();
    counted->inner = std::move(sink);
    // Weak: the engine holds the sink, the generation holds the engine.
    counted->finished = [this, weak = std::weak_ptr<generation_record>(g), alive = std::weak_ptr<bool>(alive_)] {
        auto a = alive.lock();
        if (auto g = weak.lock(); a && *a && g) controller_->release(g);
    };
    auto s = g->engine->submit(std::move(request), std::move(counted));
    if (!s) controller_->release(g);
    return s;
}

void generation_host::cancel(const std::string& request_id) {
    for (auto& e : resident()) e->cancel(request_id);  // idempotent; unknown ids are ignored
}

void generation_host::drain() {
    for (auto& e : resident()) e->drain();
}

void generation_host::resume() {
    if (auto e = current()) e->resume();
}

// --- views ---------------------------------------------------------------------

std::shared_ptr<serving_engine> generation_host::current() const {
    return controller_->read([](const alias_list& aliases) -> std::shared_ptr<serving_engine> {
        const auto& c = aliases.front()->current;
        return c ? c->engine : nullptr;
    });
}

std::shared_ptr<serving_engine> generation_host::any_resident() const {
    return controller_->read([](const alias_list& aliases) -> std::shared_ptr<serving_engine> {
        const auto& a = *aliases.front();
        if (a.current && a.current->engine) return a.current->engine;
        for (auto it = a.generations.rbegin(); it != a.generations.rend(); ++it)
            if ((*it)->engine) return (*it)->engine;
        return nullptr;
    });
}

std::vector<std::shared_ptr<serving_engine>> generation_host::resident() const {
    return controller_->read([](const alias_list& aliases) {
        std::vector<std::shared_ptr<serving_engine>> out;
        for (const auto& g : aliases.front()->generations)
            if (g->engine) out.push_back(g->engine);
        return out;
    });
}

std::int64_t generation_host::in_flight() const {
    std::int64_t n = 0;
    for (const auto& e : resident()) n += e->in_flight();
    return n;
}

}  // namespace calserve::engine
