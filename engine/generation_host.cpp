// generation_host: one alias' generations as a step machine on a deterministic runtime (generation_host.hpp).
#include "engine/generation_host.hpp"

#include <spdlog/spdlog.h>

#include "engine/generation_steps.hpp"
#include "metrics/metrics.hpp"
#include "actors/runtime/runtime.hpp"
#include "device/fault_points.hpp"
#include "model/package/package.hpp"

namespace calserve::actors {

namespace fs = std::filesystem;
using std::chrono::nanoseconds;

namespace {
// A buried engine (shut down: a retired or failed generation) is destroyed this
// much virtual time later, when no device event of it can still be pending.
constexpr nanoseconds k_grave_period = std::chrono::seconds(10);
// Shut-down engines kept at most (the oldest go first once past their grace).
constexpr std::size_t k_max_graveyard = 16;
}  // namespace

struct generation_host::gen {
    std::uint64_t number = 0;
    fs::path dir;
    bool cpu = false;
    std::vector<std::uint32_t> chips;
    std::vector<std::uint64_t> bytes;
    generation_state state = generation_state::loading;
    std::string reason;
    std::shared_ptr<serving_engine> engine;
    bool keep = false;
    std::int64_t admitted = 0;           // client requests submitted through the host, not finished
    double switch_ms = 0, drain_ms = 0;  // virtual time
    std::int64_t tail_requests = 0;
    nanoseconds t0{}, drain_since{};
};

// The load whose steps run.
struct generation_host::pending {
    std::shared_ptr<gen> g;
    load_request request;
    std::shared_ptr<serving_engine> engine;  // the candidate, until it serves
    bool drained_for_replace = false;
    std::shared_ptr<gen> drained;            // --replace: continues when this generation retires
    steps::golden_work work;
    std::vector<std::vector<token_id>> served;
    std::size_t outstanding = 0;
    std::optional<error_info> failure;
};

namespace {

// A warm-up or golden request's sink: hands its tokens and result to `done`.
struct step_sink final : generation_sink {
    std::vector<token_id> tokens;
    std::function<void(const generation_result&, std::vector<token_id>)> done;
    void on_token(const generated_token& t) override { tokens.push_back(t.token); }
    void on_finish(const generation_result& r) override { done(r, std::move(tokens)); }
};

// A client request's sink: counts the request on its generation until it finishes.
struct counted_sink final : generation_sink {
    std::shared_ptr<generation_sink> inner;
    std::function<void()> finished;
    void on_token(const generated_token& t) override { inner->on_token(t); }
    void on_finish(const generation_result& r) override {
        inner->on_finish(r);
        finished();
    }
};

}  // namespace

result<std::unique_ptr<generation_host>> generation_host::create(runtime& rt, const config& cfg, engine_setup setup,
                                                                 std::chrono::milliseconds step_timeout) {
    std::unique_ptr<generation_host> h(new generation_host(rt, cfg));
    h->step_timeout_ = step_timeout;
    h->faults_ = setup.faults;
    if (!h->faults_) {
        h->faults_ = std::make_shared<device::fault_registry>(std::uint64_t(cfg.integer("device.sim.seed")));
        declare_engine_consumers(*h->faults_);
    }
    setup.faults = h->faults_;
    h->setup_ = setup;
    auto g = std::make_shared<gen>();
    g->number = h->next_number_++;
    g->cpu = setup.package_dir.empty();
    g->dir = g->cpu ? setup.model_dir : setup.package_dir;
    if (!g->cpu) {  // where it sits, so that loads plan beside it
        if (auto p = model::package::load_package(g->dir)) {
            auto placed = steps::place_beside(setup.model_name, *p, {}, cfg, {});
            if (placed.fits) g->chips = placed.models[0].chips, g->bytes = placed.models[0].bytes;
        }
    }
    auto e = h->configure(*g);
    if (!e) return e.error();
    g->engine = std::move(*e);
    g->state = generation_state::serving;
    h->card_ = g->engine->card();
    h->alias_ = h->card_.name;
    h->current_ = g;
    h->generations_.push_back(g);
    return h;
}

generation_host::~generation_host() { *alive_ = false; }

result<std::shared_ptr<serving_engine>> generation_host::configure(const gen& g) {
    engine_setup s = setup_;
    s.package_dir.clear();
    s.model_dir.clear();
    (g.cpu ? s.model_dir : s.package_dir) = g.dir;
    if (!alias_.empty()) s.model_name = alias_;
    auto e = serving_engine::create(rt_, cfg_, s);
    if (!e) return e.error();
    return std::shared_ptr<serving_engine>(std::move(*e));
}

void generation_host::post(std::function<void()> step) {
    asio::post(rt_.context(), [alive = std::weak_ptr<bool>(alive_), step = std::move(step)] {
        if (auto a = alive.lock(); a && *a) step();
    });
}

double generation_host::ms_since(nanoseconds t) const {
    return std::chrono::duration<double, std::milli>(rt_.now() - t).count();
}

// --- requests ------------------------------------------------------------------

void_result generation_host::submit(generation_request request, std::shared_ptr<generation_sink> sink) {
    std::shared_ptr<gen> g;
    {
        std::lock_guard lock(mutex_);
        g = current_;
        if (g) ++g->admitted;
    }
    if (!g) return make_error(status::not_ready, "model '" + alias_ + "' has no serving generation now");
    auto counted = std::make_shared<counted_sink>();
    counted->inner = std::move(sink);
    // Weak: the engine holds the sink, the generation holds the engine.
    counted->finished = [this, weak = std::weak_ptr<gen>(g), alive = std::weak_ptr<bool>(alive_)] {
        auto a = alive.lock();
        if (auto g = weak.lock(); a && *a && g) finished(g);
    };
    auto s = g->engine->submit(std::move(request), std::move(counted));
    if (!s) {
        std::lock_guard lock(mutex_);
        --g->admitted;
    }
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

void generation_host::finished(const std::shared_ptr<gen>& g) {
    bool drained = false;
    {
        std::lock_guard lock(mutex_);
        drained = --g->admitted == 0 && g->state == generation_state::draining;
    }
    if (drained) post([this, g] { retire(g); });
}

// --- generations ---------------------------------------------------------------

result<std::uint64_t> generation_host::load(const load_request& request) {
    if (auto c = steps::check_load(request.alias, request.dir); !c) return c.error();
    if (request.alias != alias_)
        return make_error(status::invalid_argument, "model load: a recordable daemon serves one alias ('" + alias_ +
                                                        "'); it cannot add '" + request.alias + "'");
    if (loading_) return make_error(status::overloaded, "model load: another load is running; retry when it ends");
    auto g = std::make_shared<gen>();
    g->number = next_number_++;
    g->dir = fs::absolute(request.dir);
    g->keep = request.keep;
    {
        std::lock_guard lock(mutex_);
        generations_.push_back(g);
    }
    start_steps(g, request);
    return g->number;
}

result<std::uint64_t> generation_host::rollback(const std::string& name) {
    std::shared_ptr<gen> prev;
    {
        std::lock_guard lock(mutex_);
        if (name != alias_) return make_error(status::not_found, "model rollback: no alias '" + name + "'");
        if (!previous_) return make_error(status::not_found, "model rollback: '" + name + "' has no previous generation");
        prev = previous_;
    }
    if (prev->engine && (prev->state == generation_state::retired || prev->state == generation_state::draining)) {
        prev->switch_ms = 0;
        switch_to(prev, true);  // instant: the generation it leaves stays resident too
        return prev->number;
    }
    if (loading_) return make_error(status::overloaded, "model rollback: a load is running; retry when it ends");
    start_steps(prev, load_request{alias_, prev->dir, false, false});
    return prev->number;
}

void_result generation_host::unload(const std::string& name) {
    std::shared_ptr<gen> old;
    {
        std::lock_guard lock(mutex_);
        if (name != alias_ || !current_) return make_error(status::not_found, "model unload: no serving alias '" + name + "'");
        old = current_;
        current_ = nullptr;
        previous_ = old;
    }
    begin_drain(old, false);
    spdlog::info("models: '{}' unloaded (generation {} drains)", alias_, old->number);
    return {};
}

void generation_host::start_steps(const std::shared_ptr<gen>& g, const load_request& request) {
    loading_ = std::make_shared<pending>();
    loading_->g = g;
    loading_->request = request;
    {
        std::lock_guard lock(mutex_);
        g->state = generation_state::loading;
        g->reason.clear();
        g->t0 = rt_.now();
    }
    place_and_warm(g);
}

// Step 1 (synchronous): validate, plan, configure; then the warm-up request.
void generation_host::place_and_warm(const std::shared_ptr<gen>& g) {
    auto package = steps::validate_and_open(g->dir, cfg_);
    if (!package) return fail(g, package.error().message);
    std::vector<std::uint64_t> resident;
    {
        std::lock_guard lock(mutex_);
        resident = resident_bytes_locked(g.get());
    }
    auto placed = steps::place_beside(alias_, *package, chips_, cfg_, resident);
    auto& p = *loading_;
    if (!placed.fits) {
        if (!p.request.replace || p.drained_for_replace)
            return fail(g, "does not fit beside the resident generations (use --replace to drain the serving one first):\n" +
                               placed.plan);
        std::shared_ptr<gen> old;
        {
            std::lock_guard lock(mutex_);
            old = current_;
            if (old) current_ = nullptr, previous_ = old;  // requests now get 503 until the new generation serves
        }
        if (!old) return fail(g, "does not fit, and the alias has no serving generation to drain:\n" + placed.plan);
        spdlog::warn("models: '{}' generation {} drains to make room for generation {} (--replace)", alias_, old->number,
                     g->number);
        p.drained_for_replace = true;
        p.drained = old;
        begin_drain(old, false);  // retire() comes back here
        return;
    }
    {
        std::lock_guard lock(mutex_);
        g->chips = placed.models[0].chips;
        g->bytes = placed.models[0].bytes;
    }
    auto engine = configure(*g);
    if (!engine) return fail(g, engine.error().message);
    p.engine = std::move(*engine);
    {
        std::lock_guard lock(mutex_);
        g->state = generation_state::warming;
    }
    auto sink = std::make_shared<step_sink>();
    sink->done = [this, weak_g = std::weak_ptr<gen>(g)](const generation_result& r, std::vector<token_id>) {
        post([this, weak_g, r] {
            if (auto g = weak_g.lock()) after_warm(g, r);
        });
    };
    auto id = "warmup-" + alias_ + "-" + std::to_string(++step_requests_);
    if (auto s = p.engine->submit(steps::greedy_request(id, {steps::k_warmup_token}, steps::k_warmup_tokens, step_timeout_),
                                  sink);
        !s)
        return fail(g, "warm-up: " + s.error().what());
}

// Step 2: the warm-up ended; the golden corpus goes in.
void generation_host::after_warm(const std::shared_ptr<gen>& g, const generation_result& r) {
    if (!loading_ || loading_->g != g) return;
    if (auto failed = steps::step_failure(r, "warm-up")) return fail(g, failed->message);
    auto& p = *loading_;
    {
        std::lock_guard lock(mutex_);
        g->state = generation_state::checking;
    }
    auto work = steps::golden_work_of(*p.engine);
    if (!work) return fail(g, work.error().message);
    p.work = std::move(*work);
    p.served.assign(p.work.prompts.size(), {});
    // Weak: the candidate engine holds the sinks, the pending load holds the engine.
    std::weak_ptr<pending> weak = loading_;
    std::weak_ptr<gen> weak_g = g;
    for (std::size_t i = 0; i < p.work.prompts.size(); ++i) {
        auto sink = std::make_shared<step_sink>();
        sink->done = [this, weak, weak_g, i](const generation_result& res, std::vector<token_id> tokens) {
            auto self = weak.lock();
            if (!self) return;  // the load ended (failed) meanwhile
            if (auto failed = steps::step_failure(res, "golden check"); failed && !self->failure) self->failure = failed;
            self->served[i] = std::move(tokens);
            if (--self->outstanding == 0) post([this, weak_g] {
                    if (auto g = weak_g.lock()) judge(g);
                });
        };
        auto id = "golden-" + alias_ + "-" + std::to_string(++step_requests_);
        ++p.outstanding;
        if (auto s = p.engine->submit(steps::greedy_request(id, p.work.prompts[i], p.work.lengths[i], step_timeout_), sink);
            !s) {
            --p.outstanding;  // the ones already in finish on their own, then the verdict says why
            p.failure = error_info{s.code(), "golden check: " + s.error().what()};
            break;
        }
    }
    if (p.outstanding == 0) post([this, g] { judge(g); });
}

// Step 3: every golden request ended: the verdict, then the switch.
void generation_host::judge(const std::shared_ptr<gen>& g) {
    if (!loading_ || loading_->g != g) return;
    auto p = loading_;
    if (p->failure) return fail(g, p->failure->message);
    auto verdict = steps::judge_golden(p->work, p->served);
    if (!verdict) return fail(g, verdict.error().message);
    spdlog::info("models: '{}' generation {} passed the golden check ({} tokens, {} near ties)", alias_, g->number,
                 verdict->compared, verdict->ties);
    {
        std::lock_guard lock(mutex_);
        g->engine = p->engine;
        g->switch_ms = ms_since(g->t0);
    }
    loading_.reset();
    switch_to(g, p->request.keep);
}

void generation_host::fail(const std::shared_ptr<gen>& g, const std::string& why) {
    auto p = loading_;
    loading_.reset();
    if (p && p->engine) bury(std::move(p->engine));
    {
        std::lock_guard lock(mutex_);
        g->state = generation_state::failed;
        g->reason = why;
    }
    if (setup_.metrics) setup_.metrics->model_load_failures_total.labels({alias_}).inc();
    spdlog::error("models: '{}' generation {} failed: {}", alias_, g->number, why);
    if (p && p->drained_for_replace) restore_previous();
}

// A --replace whose load failed: the drained generation comes back (one attempt:
// a step machine does not sleep between tries; `model rollback` retries).
void generation_host::restore_previous() {
    std::shared_ptr<gen> prev;
    {
        std::lock_guard lock(mutex_);
        if (!current_ && previous_ && !previous_->engine) prev = previous_;
    }
    if (!prev) return;
    auto e = configure(*prev);
    std::lock_guard lock(mutex_);
    if (!e) {
        prev->reason = "could not be restored: " + e.error().message;
        spdlog::error("models: '{}' generation {} could not be restored: {}", alias_, prev->number, e.error().message);
        return;
    }
    prev->engine = std::move(*e);
    prev->state = generation_state::serving;
    prev->reason.clear();
    current_ = prev;
    spdlog::warn("models: '{}' generation {} restored after the failed load", alias_, prev->number);
}

void generation_host::switch_to(const std::shared_ptr<gen>& g, bool keep_old) {
    std::shared_ptr<gen> old, displaced;
    {
        std::lock_guard lock(mutex_);
        old = current_;
        if (old == g) return;
        if (previous_ == g) previous_ = nullptr;  // a rollback: what it leaves becomes the previous
        current_ = g;
        g->state = generation_state::serving;
        g->reason.clear();
        if (old) {
            // The generation rollback would have gone to is replaced by `old`: unloaded if kept resident.
            if (previous_ && previous_ != g && previous_->engine && previous_->state == generation_state::retired)
                displaced = previous_;
            previous_ = old;
        }
    }
    if (displaced) {
        std::shared_ptr<serving_engine> e;
        {
            std::lock_guard lock(mutex_);
            displaced->keep = false;
            e = std::move(displaced->engine);
            displaced->bytes.clear();
        }
        bury(std::move(e));
    }
    if (auto* m = setup_.metrics) {
        m->model_generation.labels({alias_}).set(double(g->number));
        m->model_switches_total.labels({alias_}).inc();
    }
    spdlog::info("models: '{}' switched to generation {} ({} ms of virtual time after the command){}", alias_, g->number,
                 g->switch_ms, old ? "; generation " + std::to_string(old->number) + " drains" : std::string());
    if (old) begin_drain(old, keep_old);
}

void generation_host::begin_drain(const std::shared_ptr<gen>& g, bool keep) {
    bool idle = false;
    {
        std::lock_guard lock(mutex_);
        g->state = generation_state::draining;
        g->keep = keep;
        g->drain_since = rt_.now();
        g->tail_requests = g->admitted;
        idle = g->admitted == 0;
    }
    if (idle) post([this, g] { retire(g); });
}

void generation_host::retire(const std::shared_ptr<gen>& g) {
    std::shared_ptr<serving_engine> unloaded;
    {
        std::lock_guard lock(mutex_);
        if (g->state != generation_state::draining || g->admitted != 0) return;  // switched back meanwhile
        g->state = generation_state::retired;
        g->drain_ms = ms_since(g->drain_since);
        if (!g->keep) {
            unloaded = std::move(g->engine);
            g->bytes.clear();
        }
    }
    spdlog::info("models: '{}' generation {} drained in {:.0f} ms{}", alias_, g->number, g->drain_ms,
                 g->keep ? " (kept resident)" : "");
    if (unloaded) bury(std::move(unloaded));
    if (loading_ && loading_->drained == g) {
        loading_->drained = nullptr;
        place_and_warm(loading_->g);
    }
}

void generation_host::bury(std::shared_ptr<serving_engine> engine) {
    if (!engine) return;
    engine->shutdown();
    const auto now = rt_.now();
    std::lock_guard lock(mutex_);
    std::erase_if(graveyard_, [&](const auto& e) { return now - e.first > k_grave_period; });
    if (graveyard_.size() >= k_max_graveyard) graveyard_.erase(graveyard_.begin());
    graveyard_.emplace_back(now, std::move(engine));
}

// --- views ---------------------------------------------------------------------

bool generation_host::has_history() const {
    std::lock_guard lock(mutex_);
    return generations_.size() > 1;
}

bool generation_host::loading() const { return loading_ != nullptr; }

std::shared_ptr<serving_engine> generation_host::current() const {
    std::lock_guard lock(mutex_);
    return current_ ? current_->engine : nullptr;
}

std::shared_ptr<serving_engine> generation_host::any_resident() const {
    std::lock_guard lock(mutex_);
    if (current_ && current_->engine) return current_->engine;
    for (auto it = generations_.rbegin(); it != generations_.rend(); ++it)
        if ((*it)->engine) return (*it)->engine;
    return nullptr;
}

std::vector<std::shared_ptr<serving_engine>> generation_host::resident() const {
    std::lock_guard lock(mutex_);
    std::vector<std::shared_ptr<serving_engine>> out;
    for (const auto& g : generations_)
        if (g->engine) out.push_back(g->engine);
    return out;
}

std::int64_t generation_host::in_flight() const {
    std::int64_t n = 0;
    for (const auto& e : resident()) n += e->in_flight();
    return n;
}

std::vector<generation_info> generation_host::list() const {
    std::lock_guard lock(mutex_);
    std::vector<generation_info> out;
    for (const auto& g : generations_) out.push_back(info_of(alias_, *g, g == current_));
    return out;
}

std::vector<std::uint64_t> generation_host::resident_bytes_locked(const gen* except) const {
    std::vector<std::uint64_t> out(steps::board_chips(cfg_), 0);
    for (const auto& g : generations_) {
        if (g.get() == except || !g->engine) continue;
        for (std::size_t i = 0; i < g->chips.size() && i < g->bytes.size(); ++i)
            if (g->chips[i] < out.size()) out[g->chips[i]] += g->bytes[i];
    }
    return out;
}

}  // namespace calserve::actors
