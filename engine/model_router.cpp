// model_router: aliases, generations and their state machine (model_router.hpp).
#include "engine/model_router.hpp"
#include "engine/model_router_internal.hpp"
#include "engine/generation_steps.hpp"

#include <boost/json.hpp>
#include <future>
#include <map>
#include <spdlog/spdlog.h>

#include "config/read_file.hpp"
#include "metrics/metrics.hpp"
#include "engine/serving_engine.hpp"
#include "device/device.hpp"
#include "device/fault_points.hpp"
#include "io/atomic_file.hpp"
#include "model/package/golden_corpus.hpp"
#include "model/package/hashing.hpp"
#include "model/package/placement.hpp"
#include "model/package/validate.hpp"

namespace calserve::actors {

namespace json = boost::json;
namespace fs = std::filesystem;
namespace pkg = model::package;
using steps::board_chips;
using steps::limits_of;


// How often the housekeeper looks at draining generations.
constexpr auto k_housekeeping_period = std::chrono::milliseconds(20);
// A shut-down engine lives this long before it is destroyed (device events still pending).
constexpr auto k_grave_period = std::chrono::seconds(2);
constexpr int k_state_version = 1;
// Restoring a generation drained by a failed --replace: tries, and the growing pause between them.
constexpr int k_restore_attempts = 5;
constexpr auto k_restore_backoff = std::chrono::milliseconds(500);

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

// --- the state file ----------------------------------------------------------

struct saved_generation {
    std::uint64_t number = 0;
    std::string dir;
};
struct saved_alias {
    std::string name;
    saved_generation current;
    std::optional<saved_generation> previous;
    std::uint64_t next_number = 1;
};

json::object generation_json(const saved_generation& g) { return {{"generation", g.number}, {"dir", g.dir}}; }

result<saved_generation> generation_of(const json::value* v) {
    if (!v || !v->is_object()) return make_error(status::parse_error, "expected a generation object");
    const auto& o = v->get_object();
    const auto* n = o.if_contains("generation");
    const auto* d = o.if_contains("dir");
    if (!n || !n->is_number() || !d || !d->is_string()) return make_error(status::parse_error, "generation needs number and dir");
    return saved_generation{json::value_to<std::uint64_t>(*n), std::string(d->get_string())};
}

result<std::vector<saved_alias>> read_state(const fs::path& file) {
    auto doc = read_json_file(file);
    if (!doc && doc.code() != status::parse_error) return doc.error();
    if (!doc || !doc->is_object()) return make_error(status::parse_error, "not a JSON object (torn write?)");
    const auto& o = doc->get_object();
    const auto* version = o.if_contains("version");
    const auto* sum = o.if_contains("sha256");
    const auto* mapping = o.if_contains("mapping");
    if (!version || !version->is_int64() || version->get_int64() != k_state_version)
        return make_error(status::parse_error, "unknown version");
    if (!sum || !sum->is_string() || !mapping || !mapping->is_string())
        return make_error(status::parse_error, "missing sha256 or mapping");
    if (pkg::sha256_hex(mapping->get_string()) != sum->get_string())
        return make_error(status::parse_error, "checksum mismatch (corrupted)");
    boost::system::error_code ec;
    auto m = json::parse(mapping->get_string(), ec);
    if (ec || !m.is_array()) return make_error(status::parse_error, "mapping is not an array");
    std::vector<saved_alias> out;
    for (const auto& a : m.get_array()) {
        if (!a.is_object()) return make_error(status::parse_error, "alias entry is not an object");
        const auto& ao = a.get_object();
        saved_alias s;
        const auto* name = ao.if_contains("name");
        if (!name || !name->is_string()) return make_error(status::parse_error, "alias without a name");
        s.name = std::string(name->get_string());
        auto cur = generation_of(ao.if_contains("current"));
        if (!cur) return cur.error();
        s.current = *cur;
        if (const auto* p = ao.if_contains("previous"); p && !p->is_null()) {
            auto prev = generation_of(p);
            if (!prev) return prev.error();
            s.previous = *prev;
        }
        if (const auto* n = ao.if_contains("next"); n && n->is_number()) s.next_number = json::value_to<std::uint64_t>(*n);
        out.push_back(std::move(s));
    }
    return out;
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
    std::map<std::string, saved_alias> saved;
    if (!options_.state_file.empty() && fs::exists(options_.state_file)) {
        auto state = read_state(options_.state_file);
        if (!state) {
            state_note_ = "the state file " + options_.state_file.string() + " is unusable (" + state.error().message +
                          "): serving the command line's models";
            spdlog::error("models: {}", state_note_);
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
                     options_.state_file.string());
    }
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

void model_router::persist_locked() {
    if (options_.state_file.empty()) return;
    json::array mapping;
    for (const auto& a : aliases_) {
        if (!a->current) continue;
        json::object o{{"name", a->name},
                       {"current", generation_json({a->current->number, a->current->dir.string()})},
                       {"next", a->next_number}};
        o["previous"] = a->previous ? json::value(generation_json({a->previous->number, a->previous->dir.string()}))
                                    : json::value(nullptr);
        mapping.push_back(std::move(o));
    }
    const std::string text = json::serialize(mapping);
    json::object doc{{"version", k_state_version}, {"sha256", pkg::sha256_hex(text)}, {"mapping", text}};
    if (auto w = io::write_file_atomically(options_.state_file, json::serialize(doc) + "\n"); !w)
        spdlog::error("models: cannot save the alias mapping: {}", w.error().what());
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
