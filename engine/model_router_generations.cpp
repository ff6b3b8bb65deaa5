// model_router's generations: a load brought up step by step on the worker thread
// (validate, place beside what is resident, configure, warm up, golden check), the
// switch under the router's lock, rollback, unload and the list (model_router.hpp).
#include "engine/model_router.hpp"
#include "engine/model_router_internal.hpp"
#include "engine/generation_steps.hpp"

#include <algorithm>
#include <future>
#include <spdlog/spdlog.h>

#include "metrics/metrics.hpp"
#include "engine/serving_engine.hpp"

namespace calserve::actors {

namespace fs = std::filesystem;

// Restoring a generation drained by a failed --replace: tries, and the growing pause between them.
constexpr int k_restore_attempts = 5;
constexpr auto k_restore_backoff = std::chrono::milliseconds(500);

namespace {

// --- the request path used by the warm-up and the golden check -------------

struct collect_sink final : generation_sink {
    std::vector<token_id> tokens;
    std::promise<generation_result> done;
    void on_token(const generated_token& t) override { tokens.push_back(t.token); }
    void on_finish(const generation_result& r) override { done.set_value(r); }
};

// Greedy continuations of `prompts` (all submitted at once), ignoring EOS.
result<std::vector<std::vector<token_id>>> greedy_runs(serving_engine& e, const std::vector<std::vector<token_id>>& prompts,
                                                       const std::vector<std::int64_t>& lengths,
                                                       std::chrono::milliseconds timeout, const std::string& tag,
                                                       const std::atomic<bool>& stopping) {
    std::vector<std::shared_ptr<collect_sink>> sinks;
    std::vector<std::future<generation_result>> futures;
    static std::atomic<std::uint64_t> counter{0};
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        auto r = steps::greedy_request(tag + "-" + std::to_string(counter.fetch_add(1)), prompts[i], lengths[i], timeout);
        auto sink = std::make_shared<collect_sink>();
        futures.push_back(sink->done.get_future());
        // A refusal: the ones already submitted finish on their own (their sinks are the engine's now).
        if (auto s = e.submit(std::move(r), sink); !s) return s.error();
        sinks.push_back(std::move(sink));
    }
    std::vector<std::vector<token_id>> out;
    const auto deadline = clock_type::now() + timeout + std::chrono::seconds(1);
    for (std::size_t i = 0; i < futures.size(); ++i) {
        // In slices, so that a daemon stopping mid-load does not wait out the step's timeout.
        while (futures[i].wait_for(k_housekeeping_period) != std::future_status::ready) {
            if (stopping.load()) return make_error(status::cancelled, tag + ": the daemon is stopping");
            if (clock_type::now() > deadline)
                return make_error(status::deadline_exceeded, tag + ": no answer within " + std::to_string(timeout.count()) + " ms");
        }
        if (auto failed = steps::step_failure(futures[i].get(), tag)) return *failed;
        out.push_back(sinks[i]->tokens);
    }
    return out;
}

}  // namespace

// Configures the generation's engine (the device loads and configures the package).
// With `check_golden`, also the warm-up and golden steps of a load.
result<std::shared_ptr<model_router::generation>> model_router::bring_up(const std::shared_ptr<generation>& g,
                                                                        bool check_golden) {
    engine_setup setup;
    (g->cpu ? setup.model_dir : setup.package_dir) = g->dir;
    setup.model_name = g->alias;
    setup.metrics = metrics_;
    setup.faults = faults_;
    auto e = serving_engine::create(*rt_, *cfg_, setup);
    if (!e) return e.error();
    std::shared_ptr<serving_engine> engine(std::move(*e));
    if (!check_golden) {
        g->engine = std::move(engine);
        return g;
    }
    auto fail = [&](const error_info& err) -> result<std::shared_ptr<generation>> {
        engine->shutdown();
        std::lock_guard lock(mutex_);
        auto dead = std::make_shared<generation>(*g);
        dead->engine = std::move(engine);
        dead->grave_since = clock_type::now();
        graveyard_.push_back(std::move(dead));
        return err;
    };
    {
        std::lock_guard lock(mutex_);
        g->state = generation_state::warming;
    }
    auto warm = greedy_runs(*engine, {{steps::k_warmup_token}}, {steps::k_warmup_tokens}, options_.step_timeout, "warmup-" + g->alias,
                            stopping_);
    if (!warm) return fail(make_error(warm.code(), "warm-up: " + warm.error().message));
    {
        std::lock_guard lock(mutex_);
        g->state = generation_state::checking;
    }
    auto work = steps::golden_work_of(*engine);
    if (!work) return fail(work.error());
    auto served = greedy_runs(*engine, work->prompts, work->lengths, options_.step_timeout, "golden-" + g->alias,
                              stopping_);
    if (!served) return fail(make_error(served.code(), "golden check: " + served.error().message));
    auto verdict = steps::judge_golden(*work, *served);
    if (!verdict) return fail(verdict.error());
    spdlog::info("models: '{}' generation {} passed the golden check ({} tokens, {} near ties)", g->alias, g->number,
                 verdict->compared, verdict->ties);
    g->engine = std::move(engine);
    return g;
}

// --- generations ---------------------------------------------------------------

void model_router::start_worker(std::function<void()> job) {
    if (worker_.joinable()) worker_.join();
    worker_ = std::thread([this, job = std::move(job)] {
        job();
        loading_.store(false);
        wake_.notify_all();
    });
}

result<std::uint64_t> model_router::load(const load_request& request) {
    if (auto c = steps::check_load(request.alias, request.dir); !c) return c.error();
    if (loading_.exchange(true)) return make_error(status::overloaded, "model load: another load is running; retry when it ends");
    std::shared_ptr<generation> g;
    {
        std::lock_guard lock(mutex_);
        alias* a = find_alias_locked(request.alias);
        if (!a) {
            aliases_.push_back(std::make_unique<alias>());
            a = aliases_.back().get();
            a->name = request.alias;
        }
        g = std::make_shared<generation>();
        g->alias = request.alias;
        g->number = a->next_number++;
        g->dir = fs::absolute(request.dir);
        g->keep = request.keep;
        a->generations.push_back(g);
    }
    const auto t0 = clock_type::now();
    start_worker([this, g, request, t0] { run_load(g, request, t0); });
    return g->number;
}

void model_router::run_load(std::shared_ptr<generation> g, load_request request, clock_type::time_point t0) {
    auto fail = [&](const std::string& why) {
        std::lock_guard lock(mutex_);
        g->state = generation_state::failed;
        g->reason = why;
        if (metrics_) metrics_->model_load_failures_total.labels({g->alias}).inc();
        spdlog::error("models: '{}' generation {} failed: {}", g->alias, g->number, why);
    };
    // Gates A-F.
    auto package = steps::validate_and_open(g->dir, *cfg_);
    if (!package) return fail(package.error().message);
    // Plan beside what is resident; --replace drains the serving generation first.
    bool drained_for_replace = false;
    for (int attempt = 0;; ++attempt) {
        std::vector<std::uint32_t> chips;
        std::vector<std::uint64_t> resident;
        {
            std::lock_guard lock(mutex_);
            if (auto* a = find_alias_locked(g->alias)) chips = a->chips;
            resident = resident_bytes_locked(g.get());
        }
        auto placed = steps::place_beside(g->alias, *package, chips, *cfg_, resident);
        if (placed.fits) {
            std::lock_guard lock(mutex_);
            g->chips = placed.models[0].chips;
            g->bytes = placed.models[0].bytes;
            break;
        }
        if (!request.replace || attempt > 0) {
            fail("does not fit beside the resident generations (use --replace to drain the serving one first):\n" +
                 placed.plan);
            if (drained_for_replace) restore_previous(g->alias);
            return;
        }
        std::shared_ptr<generation> old;
        {
            std::lock_guard lock(mutex_);
            alias* a = find_alias_locked(g->alias);
            old = a ? a->current : nullptr;
            if (!old) return fail("does not fit, and the alias has no serving generation to drain:\n" + placed.plan);
            a->current = nullptr;  // requests now get 503 until the new generation serves
            old->state = generation_state::draining;
            old->keep = false;
            old->drain_since = clock_type::now();
            a->previous = old;
        }
        spdlog::warn("models: '{}' generation {} drains to make room for generation {} (--replace)", g->alias,
                     old->number, g->number);
        drained_for_replace = true;
        if (auto d = wait_drained(old); !d) return fail(d.error().message);
    }
    auto up = bring_up(g, true);
    if (!up) {
        fail(up.error().message);
        if (drained_for_replace) restore_previous(g->alias);
        return;
    }
    g->switch_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
    switch_to(g->alias, g, request.keep);
}

// A --replace whose load failed: the drained generation comes back so the alias
// serves again (retried: a fault that failed the load may still be firing).
void model_router::restore_previous(const std::string& name) {
    std::shared_ptr<generation> prev;
    {
        std::lock_guard lock(mutex_);
        alias* a = find_alias_locked(name);
        if (a && !a->current && a->previous && !a->previous->engine) prev = a->previous;
    }
    if (!prev) return;
    error_info last;
    for (int attempt = 0; attempt < k_restore_attempts && !stopping_.load(); ++attempt) {
        if (attempt > 0) std::this_thread::sleep_for(k_restore_backoff * attempt);
        auto again = bring_up(prev, false);
        std::lock_guard lock(mutex_);
        if (again) {
            prev->state = generation_state::serving;
            prev->reason.clear();
            find_alias_locked(name)->current = prev;
            spdlog::warn("models: '{}' generation {} restored after the failed load", name, prev->number);
            return;
        }
        last = again.error();
    }
    std::lock_guard lock(mutex_);
    prev->reason = "could not be restored: " + last.message;
    spdlog::error("models: '{}' generation {} could not be restored: {}", name, prev->number, last.message);
}

void_result model_router::wait_drained(const std::shared_ptr<generation>& g) {
    const auto deadline = clock_type::now() + options_.drain_timeout;
    std::unique_lock lock(mutex_);
    while (g->engine) {
        if (stopping_.load()) return make_error(status::cancelled, "the daemon is stopping");
        if (clock_type::now() > deadline)
            return make_error(status::deadline_exceeded, "generation " + std::to_string(g->number) + " did not drain in time");
        wake_.wait_for(lock, k_housekeeping_period);
    }
    return {};
}

void model_router::switch_to(const std::string& name, const std::shared_ptr<generation>& g, bool keep_old) {
    std::lock_guard lock(mutex_);
    alias* a = find_alias_locked(name);
    if (!a) return;
    auto old = a->current;
    if (old == g) return;
    if (a->previous == g) a->previous = nullptr;  // a rollback: what it leaves becomes the previous
    a->current = g;
    g->state = generation_state::serving;
    g->reason.clear();
    if (old) {
        // The generation rollback would have gone to is replaced by `old`: unload it
        // if it was kept resident.
        if (auto displaced = a->previous; displaced && displaced != g && displaced->engine &&
                                          displaced->state == generation_state::retired) {
            displaced->keep = false;
            retire(*displaced);
        }
        old->state = generation_state::draining;
        old->keep = keep_old;
        old->drain_since = clock_type::now();
        old->tail_requests = old->engine ? old->engine->in_flight() : 0;
        a->previous = old;
    }
    if (std::find(a->generations.begin(), a->generations.end(), g) == a->generations.end()) a->generations.push_back(g);
    if (metrics_) {
        metrics_->model_generation.labels({name}).set(double(g->number));
        metrics_->model_switches_total.labels({name}).inc();
    }
    spdlog::info("models: '{}' switched to generation {} ({} ms after the command){}", name, g->number, g->switch_ms,
                 old ? "; generation " + std::to_string(old->number) + " drains" : std::string());
    persist_locked();
}

result<std::uint64_t> model_router::rollback(const std::string& name) {
    std::shared_ptr<generation> prev;
    {
        std::lock_guard lock(mutex_);
        alias* a = find_alias_locked(name);
        if (!a) return make_error(status::not_found, "model rollback: no alias '" + name + "'");
        if (!a->previous) return make_error(status::not_found, "model rollback: '" + name + "' has no previous generation");
        prev = a->previous;
    }
    if (prev->engine && (prev->state == generation_state::retired || prev->state == generation_state::draining)) {
        prev->switch_ms = 0;
        switch_to(name, prev, true);  // instant: the generation it leaves stays resident too
        return prev->number;
    }
    if (loading_.exchange(true)) return make_error(status::overloaded, "model rollback: a load is running; retry when it ends");
    const auto t0 = clock_type::now();
    {
        std::lock_guard lock(mutex_);
        prev->state = generation_state::loading;
        prev->reason.clear();
    }
    start_worker([this, prev, name, t0] {
        load_request r{name, prev->dir, false, false};
        run_load(prev, r, t0);
    });
    return prev->number;
}

void_result model_router::unload(const std::string& name) {
    std::lock_guard lock(mutex_);
    alias* a = find_alias_locked(name);
    if (!a || !a->current) return make_error(status::not_found, "model unload: no serving alias '" + name + "'");
    auto old = a->current;
    a->current = nullptr;
    a->previous = old;
    old->state = generation_state::draining;
    old->keep = false;
    old->drain_since = clock_type::now();
    persist_locked();
    spdlog::info("models: '{}' unloaded (generation {} drains)", name, old->number);
    return {};
}

void model_router::wait_idle() {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return !loading_.load(); });
}

std::vector<generation_info> model_router::list() const {
    std::lock_guard lock(mutex_);
    std::vector<generation_info> out;
    for (const auto& a : aliases_) {
        for (const auto& g : a->generations) out.push_back(info_of(a->name, *g, g == a->current));
    }
    return out;
}

}  // namespace calserve::actors
