// The deterministic simulation the soak and replay drive (see simulation.hpp).
#include "soak/simulation.hpp"

#include <mutex>

#include "actors/batch_tick_actor.hpp"
#include "actors/device_actor.hpp"
#include "engine/generation_host.hpp"
#include "engine/model_router.hpp"
#include "actors/kv_manager_actor.hpp"
#include "actors/runtime/lifecycle.hpp"
#include "actors/runtime/runtime.hpp"
#include "engine/serving_engine.hpp"
#include "config/config.hpp"
#include "device/fault_points.hpp"
#include "device/package_spec.hpp"
#include "device/sim/sim_device.hpp"
#include "io/atomic_dir.hpp"
#include "model/core/bf16.hpp"
#include "model/weights/synthetic_model.hpp"
#include "metrics/metrics.hpp"
#include "model/cpu/transformer.hpp"

namespace calserve::soak {
namespace {

struct stream {
    std::string id;
    std::vector<std::int32_t> prompt;
    std::int64_t max_tokens = 0;
    bool greedy = false, ignore_eos = false;
    std::vector<std::int32_t> tokens;
    std::optional<consumer_model> consumer;
    std::int64_t submit_ns = 0, first_token_ns = -1, finish_ns = 0;
    std::int64_t last_token_ns = -1, max_gap_ns = 0;
    bool overflowed = false;
    int finishes = 0;
    actors::finish_reason reason = actors::finish_reason::stop;
};

}  // namespace

// Streams by id plus the ones finished since the driver last looked. Sinks run
// on the driver thread (deterministic mode); the mutex only keeps that honest.
struct simulation::tracker {
    std::mutex mutex;
    std::map<std::string, std::shared_ptr<stream>> live;
    std::vector<std::shared_ptr<stream>> finished;
    std::vector<std::string> slow;  // slow consumers that overflowed, not yet cancelled
    std::vector<std::string> violations;
};

namespace {
struct sink final : actors::generation_sink {
    std::shared_ptr<stream> s;
    std::weak_ptr<simulation::tracker> t;
    const actors::runtime* rt = nullptr;
    void on_token(const actors::generated_token& tok) override {
        s->tokens.push_back(tok.token);
        const std::int64_t now = rt->now().count();
        if (s->first_token_ns < 0) s->first_token_ns = now;
        if (s->last_token_ns >= 0) s->max_gap_ns = std::max(s->max_gap_ns, now - s->last_token_ns);
        s->last_token_ns = now;
        if (!s->consumer || s->overflowed) return;
        // Tokens the client has read by now; the rest wait in the server's bounded queue.
        auto read = std::int64_t(double(now - s->first_token_ns) * 1e-9 * s->consumer->tokens_per_s);
        if (std::int64_t(s->tokens.size()) - read <= s->consumer->queue) return;
        s->overflowed = true;
        if (auto tr = t.lock()) {
            std::lock_guard lock(tr->mutex);
            tr->slow.push_back(s->id);
        }
    }
    void on_finish(const actors::generation_result& r) override {
        auto tr = t.lock();
        if (!tr) return;
        std::lock_guard lock(tr->mutex);
        if (++s->finishes > 1) {
            tr->violations.push_back("request " + s->id + " finished " + std::to_string(s->finishes) + " times");
            return;
        }
        s->reason = r.reason;
        s->finish_ns = rt->now().count();
        // A request-class answer about its own KV sequence: the runtime asked the device
        // about a sequence it does not hold (or allocated one twice), and a client lost its answer.
        if (r.failure && (r.failure->code == status::unknown_sequence || r.failure->code == status::sequence_exists))
            tr->violations.push_back("request " + s->id + " ended with " + std::string(to_string(r.failure->code)) + ": " +
                                     r.failure->what());
        tr->live.erase(s->id);
        tr->finished.push_back(s);
    }
};
}  // namespace

result<std::unique_ptr<simulation>> simulation::create(const sim_setup& setup, message_observer observer,
                                                       input_observer inputs, fire_observer fires) {
    std::unique_ptr<simulation> sim(new simulation());
    sim->setup_ = setup;
    sim->observer_ = std::move(observer);
    sim->inputs_ = std::move(inputs);
    sim->tracker_ = std::make_shared<tracker>();
    // The greedy check's reference computes in fp32: so does the cpu backend here.
    std::vector<std::string> overrides{"device.cpu_arithmetic=fp32"};
    overrides.insert(overrides.end(), setup.overrides.begin(), setup.overrides.end());
    auto cfg = config::load(std::nullopt, overrides);
    if (!cfg) return cfg.error();
    sim->rt_ = std::make_unique<actors::runtime>(actors::run_mode::deterministic, 1);
    sim->registry_ = std::make_unique<metrics::registry>();
    sim->metrics_ = std::make_unique<metrics::calserve_metrics>(*sim->registry_);
    simulation* self = sim.get();
    sim->rt_->set_delivery_hook([self](const actors::delivery& d) {
        ++self->report_.messages;
        if (self->observer_)
            self->observer_(io::trace_message{d.sequence, d.time.count(), d.from.value, d.to.value, std::string(d.from_name),
                                              std::string(d.to_name), std::string(d.type)});
    });
    sim->illegal_at_start_ = actors::illegal_transitions_total();
    engine::engine_setup es;
    if (setup.package_dir.empty())
        es.model_dir = setup.model_dir;
    else
        es.package_dir = setup.package_dir;
    es.model_name = setup.alias;
    es.metrics = sim->metrics_.get();
    // Its step timeout is the daemon's, so that a replayed load times out where the recorded one did.
    auto e = engine::generation_host::create(*sim->rt_, *cfg, es, engine::router_options{}.step_timeout);
    if (!e) return e.error();
    sim->host_ = std::move(e.value());
    if (fires) {
        auto* rt = sim->rt_.get();
        sim->host_->faults()->set_fire_observer([rt, fires = std::move(fires)](const device::fault_fire& f) {
            fires(io::trace_fire{rt->now().count(), std::string(device::to_string(f.point)), f.arm_id});
        });
    }
    sim->rt_->run_until_idle();
    while (sim->engine().device_state() != actors::device_health::ready && sim->rt_->advance_to_next_timer()) {
    }
    if (sim->engine().device_state() != actors::device_health::ready)
        return make_error(status::not_ready, "simulation: device never became ready");
    if (setup.engine_seq != 0) sim->engine().set_sequence_counter(setup.engine_seq);
    if (setup.check_reference) {
        auto dir = setup.model_dir;
        if (!setup.package_dir.empty()) {  // the package's own reference checkpoint
            auto spec = device::package_spec_from_dir(setup.package_dir);
            if (!spec) return spec.error();
            dir = spec->reference_model_dir;
        }
        auto lm = model::load_causal_lm(dir, {});
        if (!lm) return lm.error();
        sim->reference_ = std::move(lm.value());
    }
    return sim;
}

simulation::~simulation() {
    if (rt_) rt_->set_delivery_hook({});
    if (host_) host_->faults()->set_fire_observer({});
    host_.reset();
}

engine::serving_engine& simulation::engine() const { return *host_->any_resident(); }
std::int64_t simulation::now_ns() const { return rt_->now().count(); }
std::int64_t simulation::vocab_size() const { return host_->card().vocab_size; }
bool simulation::faults_armed() const { return host_->faults()->any_armed(); }

std::optional<std::int64_t> simulation::next_due_ns() {
    rt_->run_until_idle();
    if (auto due = rt_->next_timer_due()) return due->count();
    return std::nullopt;
}

void simulation::advance_to(std::int64_t t_ns) {
    // Timer by timer (the same deliveries as one run_for), so a slow consumer's
    // cancel is applied at the instant it overflowed.
    const auto target = std::chrono::nanoseconds(t_ns);
    rt_->run_until_idle();
    cancel_slow_consumers();
    while (true) {
        auto due = rt_->next_timer_due();
        const bool timer_next = due && *due <= target;
        // The operator acts at its instant, after the timers due before it (as a replay applies an input).
        if (operator_due_ && *operator_due_ <= t_ns && (!timer_next || std::chrono::nanoseconds(*operator_due_) < *due)) {
            if (std::chrono::nanoseconds(*operator_due_) > rt_->now()) rt_->run_for(std::chrono::nanoseconds(*operator_due_) - rt_->now());
            operator_reset();
            continue;
        }
        if (!timer_next) break;
        rt_->advance_to_next_timer();
        sample_kv();
        cancel_slow_consumers();
    }
    if (target > rt_->now()) rt_->run_for(target - rt_->now());
    rt_->run_until_idle();
    sample_kv();
}

void simulation::sample_kv() {
    kv_blocks_peak_ = std::max(kv_blocks_peak_, std::int64_t(metrics_->kv_blocks_used.value()));
}

engine_figures simulation::figures() const {
    engine_figures f;
    f.device_busy_s = metrics_->device_busy_seconds.value();
    f.kv_blocks_peak = kv_blocks_peak_;
    f.kv_blocks_capacity = std::int64_t(metrics_->kv_blocks_capacity.value());
    f.prefix_cache_queries = metrics_->prefix_cache_queries.value();
    f.prefix_cache_hits = metrics_->prefix_cache_hits.value();
    return f;
}

void simulation::operator_reset() {
    operator_due_.reset();
    ++report_.operator_resets;
    live_by_ = now_ns() + k_operator_liveness_ns;
    // The operator removes the cause (every armed fault), then resets the device: `ctl
    // fault clear` and `ctl device reset`, recorded as the inputs a replay applies.
    const io::trace_input steps[] = {io::trace_clear{now_ns(), std::nullopt, std::nullopt},
                                     io::trace_control{now_ns(), "reset"}};
    for (const auto& in : steps) {
        if (inputs_) inputs_(in);
        apply(in);
    }
}

void simulation::cancel_slow_consumers() {
    std::vector<std::string> ids;
    {
        std::lock_guard lock(tracker_->mutex);
        ids.swap(tracker_->slow);
    }
    if (ids.empty()) return;
    // As replay will: timers due at this instant fire first, then the cancels are applied.
    rt_->run_for(std::chrono::nanoseconds(0));
    for (const auto& id : ids) {
        io::trace_cancel c{now_ns(), id};
        if (inputs_) inputs_(c);
        ++report_.slow_cancels;
        ++report_.cancels;
        host_->cancel(id);
        rt_->run_until_idle();
    }
    check_step();
}

void simulation::apply(const io::trace_input& input, const std::optional<consumer_model>& consumer) {
    advance_to(io::input_time(input));
    if (auto* s = std::get_if<io::trace_submit>(&input)) {
        submit(*s, consumer);
    } else if (auto* c = std::get_if<io::trace_cancel>(&input)) {
        ++report_.cancels;
        host_->cancel(c->id);
    } else if (auto* a = std::get_if<io::trace_arm>(&input)) {
        arm(*a);
    } else if (auto* k = std::get_if<io::trace_clear>(&input)) {
        auto& reg = *host_->faults();
        if (k->id) {
            reg.clear_id(*k->id);
        } else if (k->point) {
            if (auto p = device::parse_fault_point(*k->point)) reg.clear(*p);
        } else {
            reg.clear();
        }
    } else if (auto* c = std::get_if<io::trace_control>(&input)) {
        if (c->command == "drain")
            host_->drain();
        else if (c->command == "resume")
            host_->resume();
        else if (auto e = host_->any_resident())
            e->reset_device("control socket");
    } else if (auto* m = std::get_if<io::trace_model>(&input)) {
        generation_op(*m);
    }
    rt_->run_until_idle();
    cancel_slow_consumers();
    check_step();
}

void simulation::submit(const io::trace_submit& s, const std::optional<consumer_model>& consumer) {
    actors::generation_request r;
    r.id = s.id;
    r.prompt = s.prompt;
    r.max_tokens = s.max_tokens;
    r.sampling.temperature = float(s.temperature);
    r.sampling.top_p = float(s.top_p);
    r.sampling.top_k = s.top_k;
    r.sampling.seed = s.seed;
    r.ignore_eos = s.ignore_eos;
    r.cache_salt = s.cache_salt;
    r.timeout = std::chrono::milliseconds(s.timeout_ms);
    r.sampling.min_p = float(s.min_p);
    r.sampling.presence_penalty = float(s.presence_penalty);
    r.sampling.frequency_penalty = float(s.frequency_penalty);
    r.sampling.repetition_penalty = float(s.repetition_penalty);
    for (const auto& [tok, bias] : s.logit_bias) r.sampling.logit_bias.emplace_back(tok, float(bias));
    r.sampling.logprobs = s.logprobs;
    r.sampling.top_logprobs = s.top_logprobs;
    r.stop = s.stop;
    r.stop_token_ids = s.stop_token_ids;
    r.constraint.kind = static_cast<model::grammar::grammar_kind>(s.grammar_kind);
    r.constraint.grammar = s.grammar;
    r.constraint.thinking = s.thinking;
    r.constraint.max_reasoning_tokens = s.max_reasoning_tokens;
    auto st = std::make_shared<stream>();
    st->id = s.id;
    st->submit_ns = now_ns();
    st->prompt = s.prompt;
    st->max_tokens = s.max_tokens;
    // Comparable with the reference's plain greedy continuation only without anything that reshapes logits or ends early.
    st->greedy = s.temperature == 0 && s.logit_bias.empty() && s.presence_penalty == 0 && s.frequency_penalty == 0 &&
                 s.repetition_penalty == 1 && s.stop.empty() && s.stop_token_ids.empty() && s.grammar.empty() &&
                 s.grammar_kind == 0 && !s.thinking;
    st->ignore_eos = s.ignore_eos;
    st->consumer = consumer;
    if (consumer) ++report_.slow_consumers;
    auto k = std::make_shared<sink>();
    k->s = st;
    k->t = tracker_;
    k->rt = rt_.get();
    {
        std::lock_guard lock(tracker_->mutex);
        tracker_->live[s.id] = st;
    }
    ++report_.submitted;
    if (!host_->submit(std::move(r), k).ok()) {
        ++report_.rejected;
        std::lock_guard lock(tracker_->mutex);
        tracker_->live.erase(s.id);
        if (st->finishes != 0) tracker_->violations.push_back("rejected request " + s.id + " got on_finish");
    }
}

void simulation::arm(const io::trace_arm& a) {
    auto spec = device::make_fault_spec(a.point, a.mode, a.count, a.probability, a.seed, a.delay_ms,
                                        {a.chip, a.submodel, a.sequence, a.request});
    if (!spec) return violation("trace arms an unknown fault: " + spec.error().message);
    ++report_.arms;
    if (auto r = host_->faults()->arm(*spec); !r) violation("arm " + a.point + ": " + r.error().message);
}

// As the daemon applied it (traced_engine records only the accepted ones): a refusal here is a divergence.
void simulation::generation_op(const io::trace_model& m) {
    ++report_.generation_ops;
    void_result r;
    if (m.op == "load") {
        if (auto n = host_->load(engine::load_request{m.alias, m.dir, m.replace, m.keep}); !n) r = n.error();
    } else if (m.op == "rollback") {
        if (auto n = host_->rollback(m.alias); !n) r = n.error();
    } else {
        r = host_->unload(m.alias);
    }
    if (!r) violation("model " + m.op + " " + m.alias + " was refused: " + r.error().message);
}

bool simulation::generation_busy() const { return host_->loading(); }
const std::string& simulation::alias() const { return host_->alias(); }

void simulation::violation(std::string what) {
    report_.violations.push_back("t=" + std::to_string(now_ns()) + "ns: " + std::move(what));
}

void simulation::check_step() {
    {
        std::lock_guard lock(tracker_->mutex);
        for (auto& v : tracker_->violations) violation(std::move(v));
        tracker_->violations.clear();
    }
    for (auto& f : rt_->failures()) violation("runtime failure: " + f);
    for (const auto& e : host_->resident())
        if (!e->kv_manager().pool().conserved()) violation("KV pool not conserved");
    if (actors::illegal_transitions_total() != illegal_at_start_) violation("illegal lifecycle transition");
    check_device_calls();
    check_liveness();
    check_finished_streams();
}

// No device call answers unknown_sequence or sequence_exists (kv_free aside: it frees
// "stale KV, if any"): the runtime sends no job or KV operation for a sequence the device
// does not hold, whatever the interleaving of resets, cache drops, copies and cancels.
void simulation::check_device_calls() {
    for (const auto& e : host_->resident()) {
        const auto* sim = dynamic_cast<const device::sim::sim_device*>(&e->dev());
        if (!sim) continue;
        const auto misuse = sim->sequence_misuses();
        auto& seen = misuses_seen_[e.get()];
        if (misuse.count == seen) continue;
        violation(std::to_string(misuse.count - seen) + " device call(s) about a sequence the device does not hold (last: " +
                  misuse.last + ")");
        seen = misuse.count;
    }
}

// A dead device is a violation, unless the operator model stands in for the operator
// who resets it (sim_setup::operator_model); then the violation is a device that is
// not serving again k_operator_liveness_ns after that reset.
void simulation::check_liveness() {
    auto current = host_->any_resident();
    if (!current) return;
    const auto state = current->device_state();
    if (state != actors::device_health::dead) {
        dead_seen_ = false;
        if (state == actors::device_health::ready) live_by_.reset();
    } else if (!setup_.operator_model) {
        if (!dead_reported_) violation("device dead");
        dead_reported_ = true;
    } else if (!dead_seen_) {
        dead_seen_ = true;
        ++report_.dead_episodes;
        live_by_.reset();  // a new episode: the next operator reset restarts the clock
        operator_due_ = now_ns() + k_operator_delay_ns;
    }
    if (live_by_ && now_ns() > *live_by_) {
        violation("device not ready " + std::to_string(k_operator_liveness_ns / 1'000'000'000) +
                  " s after the operator's reset");
        live_by_.reset();
    }
}

void simulation::check_finished_streams() {
    std::vector<std::shared_ptr<stream>> done;
    {
        std::lock_guard lock(tracker_->mutex);
        done.swap(tracker_->finished);
    }
    for (auto& s : done) {
        ++report_.finished[std::size_t(s->reason)];
        outcomes_.push_back(sim_request{s->id, s->submit_ns, s->first_token_ns, s->finish_ns,
                                            std::int64_t(s->tokens.size()), actors::to_string(s->reason), s->max_gap_ns});
        bool comparable = s->greedy && s->ignore_eos && s->reason == actors::finish_reason::length;
        if (!comparable || !reference_) continue;
        if (std::int64_t(s->tokens.size()) != s->max_tokens) {
            violation("request " + s->id + " ended by length with " + std::to_string(s->tokens.size()) + " tokens");
            continue;
        }
        // Reference greedy continuation: argmax over BF16-rounded logits, ties to the lowest id.
        auto& m = *reference_;
        const model::seq_id seq = next_ref_seq_++;
        std::vector<float> logits(std::size_t(m.shape().vocab_size));
        auto argmax = [&] {
            std::size_t best = 0;
            float best_v = -1e30f;
            for (std::size_t i = 0; i < logits.size(); ++i)
                if (float v = model::bf16_to_f32(model::f32_to_bf16(logits[i])); v > best_v) best_v = v, best = i;
            return std::int32_t(best);
        };
        bool ok = m.prefill(seq, s->prompt, logits).ok();
        for (std::size_t i = 0; ok && i < s->tokens.size(); ++i) {
            if (argmax() != s->tokens[i]) {
                violation("request " + s->id + " greedy token " + std::to_string(i) + " differs from the reference");
                break;
            }
            if (i + 1 < s->tokens.size()) ok = m.decode(seq, s->tokens[i], logits).ok();
        }
        if (!ok) violation("reference model failed on request " + s->id);
        m.free_sequence(seq);
        ++report_.greedy_checked;
    }
}

// A request that ended while a job held its sequence (a cancel mid-job) is out of flight
// at once, but its sequence and KV go back only when that job ends: the drain waits for
// it (seed 766, docs/soak.md).
bool simulation::sequences_held() const {
    for (const auto& e : host_->resident())
        if (e->batch_tick().sequences() != 0 || e->kv_manager().pool().reserved_blocks() != 0) return true;
    return false;
}

void simulation::finish(double limit_s) {
    auto limit = rt_->now() + std::chrono::nanoseconds(std::int64_t(limit_s * 1e9));
    rt_->run_until_idle();
    cancel_slow_consumers();
    // A device that died near the end: the operator still resets it, and it must come back.
    if (operator_due_) advance_to(*operator_due_);
    while ((host_->in_flight() > 0 || host_->loading() || live_by_ || sequences_held()) && rt_->now() < limit &&
           rt_->advance_to_next_timer()) {
        sample_kv();
        cancel_slow_consumers();
        check_liveness();
    }
    if (live_by_) violation("device not ready at the end, after the operator's reset");
    rt_->run_until_idle();
    check_step();
    report_.end_ns = now_ns();
    {
        std::lock_guard lock(tracker_->mutex);
        for (auto& [id, s] : tracker_->live) violation("request " + id + " never finished");
    }
    if (host_->in_flight() != 0) violation("in_flight " + std::to_string(host_->in_flight()) + " at the end");
    for (const auto& e : host_->resident()) {
        if (auto r = e->kv_manager().pool().reserved_blocks(); r != 0)
            violation(std::to_string(r) + " KV blocks still reserved at the end");
        if (e->batch_tick().sequences() != 0) violation("BatchTick still holds sequences at the end");
        // Every block is free, reserved or cached, never two; the cached ones are exactly
        // the prefix cache's entries, whose index names only live entries.
        const auto& kv = e->kv_manager();
        if (!kv.pool().conserved()) violation("KV blocks not conserved at the end");
        if (kv.pool().cached_sequences() != kv.cache().kept_entries())
            violation("cached KV holdings differ from the prefix cache's entries");
        if (kv.keys_held() != 0) violation(std::to_string(kv.keys_held()) + " prompt key chains outlive their sequences");
        if (kv.cache().running_entries() != 0)
            violation(std::to_string(kv.cache().running_entries()) + " running prefix cache entries outlive their sequences");
        if (!kv.cache().consistent()) violation("prefix cache index inconsistent at the end");
        report_.cache_hit_tokens += std::uint64_t(kv.cache_hits());
        report_.device_resets += e->device_resets();
        report_.preemptions += e->batch_tick().preemptions();
    }
    for (auto p : device::all_fault_points) report_.faults_fired += host_->faults()->fires(p);
    report_.verify_rows = std::uint64_t(metrics_->spec_verify_rows.value());
    report_.drafted_tokens = std::uint64_t(metrics_->spec_drafted_tokens.value());
    report_.accepted_tokens = std::uint64_t(metrics_->spec_accepted_tokens.value());
}

void_result ensure_synthetic_model(const std::filesystem::path& dir, const std::filesystem::path& tokenizer_dir,
                                   const std::string& preset) {
    return io::build_directory_atomically(
        dir, [](const std::filesystem::path& d) { return std::filesystem::exists(d / "tokenizer.json"); },
        [&](const std::filesystem::path& d) { return model::make_synthetic_model(preset, d, 7, "f32", tokenizer_dir); });
}

}  // namespace calserve::soak
