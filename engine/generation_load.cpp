// generation_controller: a load's steps as a step machine on its driver
// (generation_controller.hpp, generation_lifecycle.hpp):
//
//   place_and_warm (synchronous: validate gates A-F, plan beside what is resident,
//     configure the candidate; --replace first drains the serving generation, and
//     its retirement comes back here) -> the warm-up request is submitted
//   -> after_warm (its sink posted it): the golden corpus is submitted
//   -> judge (the last golden sink posted it): the verdict, then the switch.
//
// A failure at any step buries the candidate and leaves the serving generation as it
// was; a failed --replace brings the drained generation back (restore_previous).
#include "engine/generation_controller.hpp"

#include <spdlog/spdlog.h>

#include "engine/generation_driver.hpp"
#include "engine/generation_steps.hpp"
#include "engine/serving_engine.hpp"
#include "metrics/metrics.hpp"

namespace calserve::engine {

using std::chrono::nanoseconds;

// The running load: its candidate engine and the answers of its step requests.
struct generation_controller::pending {
    std::shared_ptr<generation_record> g;
    load_request request;
    std::shared_ptr<serving_engine> engine;   // the candidate, until it serves
    bool drained_for_replace = false;
    std::shared_ptr<generation_record> drained;      // --replace: the load continues when this generation retires
    steps::golden_work work;
    std::string step;                         // the step whose requests are out ("warm-up", "golden check")
    std::optional<std::chrono::nanoseconds> deadline;      // when the worker driver gives up on them
    std::mutex answers_mutex;                 // golden sinks may finish on several runtime threads
    std::vector<std::vector<actors::token_id>> served;
    std::size_t outstanding = 0;              // golden requests not finished, +1 while submitting
    std::optional<error_info> failure;
};

namespace {

// A warm-up or golden request's sink: hands its tokens and result to `done`.
struct step_sink final : actors::generation_sink {
    std::vector<actors::token_id> tokens;
    std::function<void(const actors::generation_result&, std::vector<actors::token_id>)> done;
    void on_token(const actors::generated_token& t) override { tokens.push_back(t.token); }
    void on_finish(const actors::generation_result& r) override { done(r, std::move(tokens)); }
};

}  // namespace

// Posts a step from any thread (a sink's): holds the driver, never the controller.
std::function<void(std::function<void()>)> generation_controller::poster() const {
    return [driver = driver_, alive = std::weak_ptr<bool>(alive_)](std::function<void()> step) {
        driver->post([alive, step = std::move(step)] {
            if (auto a = alive.lock(); a && *a) step();
        });
    };
}

void generation_controller::start_steps(const std::shared_ptr<generation_record>& g, load_request request) {
    pending_ = std::make_shared<pending>();
    pending_->g = g;
    pending_->request = std::move(request);
    place_and_warm(g);
}

// Step 1 (synchronous): validate, plan, configure; then the warm-up request.
void generation_controller::place_and_warm(const std::shared_ptr<generation_record>& g) {
    auto package = steps::validate_and_open(g->dir, cfg_);
    if (!package) return fail(g, package.error().message);
    std::vector<std::uint32_t> chips;
    std::vector<std::uint64_t> resident;
    {
        std::lock_guard lock(mutex_);
        if (auto* a = find_locked(g->alias)) chips = a->chips;
        resident = resident_bytes_locked(g.get());
    }
    auto placed = steps::place_beside(g->alias, *package, chips, cfg_, resident);
    if (!placed.fits) {
        if (!pending_->request.replace || pending_->drained_for_replace)
            return fail(g, "does not fit beside the resident generations (use --replace to drain the serving one first):\n" +
                               placed.plan);
        drain_for_replace(g, placed.plan);
        return;
    }
    {
        std::lock_guard lock(mutex_);
        g->chips = placed.models[0].chips;
        g->bytes = placed.models[0].bytes;
    }
    auto engine = hooks_.configure(*g);
    if (!engine) return fail(g, engine.error().message);
    auto& p = *pending_;
    p.engine = std::move(*engine);
    {
        std::lock_guard lock(mutex_);
        g->transition_to(generation_state::warming);
    }
    auto sink = std::make_shared<step_sink>();
    sink->done = [this, later = poster(), weak_g = std::weak_ptr<generation_record>(g)](const actors::generation_result& r,
                                                                                 std::vector<actors::token_id>) {
        later([this, weak_g, r] {
            if (auto g = weak_g.lock()) after_warm(g, r);
        });
    };
    p.step = "warm-up";
    p.deadline = driver_->now() + options_.step_timeout + std::chrono::seconds(1);
    auto id = "warmup-" + g->alias + "-" + std::to_string(++step_requests_);
    if (auto s = p.engine->submit(steps::greedy_request(id, {steps::k_warmup_token}, steps::k_warmup_tokens,
                                                        options_.step_timeout),
                                  sink);
        !s)
        return fail(g, "warm-up: " + s.error().what());
}

// --replace: the serving generation drains first (requests get 503 until the new one
// serves); its retirement calls continue_after_drain.
void generation_controller::drain_for_replace(const std::shared_ptr<generation_record>& g, const std::string& plan) {
    std::shared_ptr<generation_record> old;
    {
        std::lock_guard lock(mutex_);
        auto* a = find_locked(g->alias);
        old = a ? a->current : nullptr;
        if (old) a->current = nullptr, a->previous = old;
    }
    if (!old) return fail(g, "does not fit, and the alias has no serving generation to drain:\n" + plan);
    spdlog::warn("models: '{}' generation {} drains to make room for generation {} (--replace)", g->alias, old->number,
                 g->number);
    pending_->drained_for_replace = true;
    pending_->drained = old;
    std::lock_guard lock(mutex_);
    begin_drain_locked(old, false);
}

void generation_controller::continue_after_drain(const std::shared_ptr<generation_record>& g) {
    if (!pending_ || pending_->drained != g) return;
    pending_->drained = nullptr;
    place_and_warm(pending_->g);
}

// Step 2: the warm-up ended; the golden corpus goes in.
void generation_controller::after_warm(const std::shared_ptr<generation_record>& g, const actors::generation_result& r) {
    if (!pending_ || pending_->g != g) return;
    if (auto failed = steps::step_failure(r, "warm-up")) return fail(g, failed->message);
    auto& p = *pending_;
    {
        std::lock_guard lock(mutex_);
        g->transition_to(generation_state::checking);
    }
    auto work = steps::golden_work_of(*p.engine);
    if (!work) return fail(g, work.error().message);
    p.work = std::move(*work);
    p.served.assign(p.work.prompts.size(), {});
    p.step = "golden check";
    p.deadline = driver_->now() + options_.step_timeout + std::chrono::seconds(1);
    submit_golden(g);
}

void generation_controller::submit_golden(const std::shared_ptr<generation_record>& g) {
    auto& p = *pending_;
    // Weak: the candidate engine holds the sinks, the pending load holds the engine.
    std::weak_ptr<pending> weak = pending_;
    std::weak_ptr<generation_record> weak_g = g;
    auto answered = [this, later = poster(), weak, weak_g] {  // under answers_mutex
        if (auto self = weak.lock(); self && --self->outstanding == 0) later([this, weak_g] {
                if (auto g = weak_g.lock()) judge(g);
            });
    };
    std::lock_guard answers(p.answers_mutex);
    p.outstanding = 1;  // the submitting loop's own count: no verdict before every request is in
    for (std::size_t i = 0; i < p.work.prompts.size(); ++i) {
        auto sink = std::make_shared<step_sink>();
        sink->done = [weak, i, answered](const actors::generation_result& res, std::vector<actors::token_id> tokens) {
            auto self = weak.lock();
            if (!self) return;  // the load ended (failed) meanwhile
            std::lock_guard lock(self->answers_mutex);
            if (auto failed = steps::step_failure(res, "golden check"); failed && !self->failure) self->failure = failed;
            self->served[i] = std::move(tokens);
            answered();
        };
        auto id = "golden-" + g->alias + "-" + std::to_string(++step_requests_);
        ++p.outstanding;
        p.answers_mutex.unlock();  // a sink may finish at once on another thread
        auto s = p.engine->submit(steps::greedy_request(id, p.work.prompts[i], p.work.lengths[i], options_.step_timeout), sink);
        p.answers_mutex.lock();
        if (!s) {
            --p.outstanding;  // the ones already in finish on their own, then the verdict says why
            p.failure = error_info{s.code(), "golden check: " + s.error().what()};
            break;
        }
    }
    answered();
}

// Step 3: every golden request ended: the verdict, then the switch.
void generation_controller::judge(const std::shared_ptr<generation_record>& g) {
    if (!pending_ || pending_->g != g) return;
    auto p = pending_;
    if (p->failure) return fail(g, p->failure->message);
    auto verdict = steps::judge_golden(p->work, p->served);
    if (!verdict) return fail(g, verdict.error().message);
    spdlog::info("models: '{}' generation {} passed the golden check ({} tokens, {} near ties)", g->alias, g->number,
                 verdict->compared, verdict->ties);
    {
        std::lock_guard lock(mutex_);
        g->engine = p->engine;
        g->switch_ms = ms_since(g->t0);
    }
    pending_.reset();
    switch_to(g, p->request.keep);
    end_load();
}

void generation_controller::fail(const std::shared_ptr<generation_record>& g, const std::string& why) {
    auto p = std::move(pending_);
    if (p && p->engine) bury(std::move(p->engine));
    {
        std::lock_guard lock(mutex_);
        g->transition_to(generation_state::failed);
        g->reason = why;
    }
    if (options_.metrics) options_.metrics->model_load_failures_total.labels({g->alias}).inc();
    spdlog::error("models: '{}' generation {} failed: {}", g->alias, g->number, why);
    if (p && p->drained_for_replace) restore_previous(g->alias);
    end_load();
}

// A --replace whose load failed: the drained generation comes back so the alias
// serves again (options_.restore_attempts tries: a fault that failed the load may
// still be firing; the deterministic host makes one, it never sleeps).
void generation_controller::restore_previous(const std::string& name) {
    std::shared_ptr<generation_record> prev;
    {
        std::lock_guard lock(mutex_);
        auto* a = find_locked(name);
        if (a && !a->current && a->previous && !a->previous->engine) prev = a->previous;
    }
    if (!prev) return;
    error_info last{status::cancelled, "the daemon is stopping"};
    for (int attempt = 0; attempt < options_.restore_attempts && !stopping_; ++attempt) {
        if (attempt > 0 && !driver_->pause(options_.restore_backoff * attempt)) break;
        auto e = hooks_.configure(*prev);
        std::lock_guard lock(mutex_);
        if (e) {
            prev->engine = std::move(*e);
            prev->transition_to(generation_state::serving);
            prev->reason.clear();
            find_locked(name)->current = prev;
            spdlog::warn("models: '{}' generation {} restored after the failed load", name, prev->number);
            return;
        }
        last = e.error();
    }
    std::lock_guard lock(mutex_);
    prev->reason = "could not be restored: " + last.message;
    spdlog::error("models: '{}' generation {} could not be restored: {}", name, prev->number, last.message);
}

// Worker driver: step requests unanswered a second past their own timeout fail the load.
void generation_controller::check_deadline(std::chrono::nanoseconds now) {
    if (!pending_ || !pending_->deadline || now <= *pending_->deadline || !pending_->engine) return;
    fail(pending_->g, pending_->step + ": no answer within " + std::to_string(options_.step_timeout.count()) + " ms");
}

void generation_controller::abandon(const std::string& why) {
    stopping_ = true;
    if (pending_) fail(pending_->g, why);
}

}  // namespace calserve::engine
