#include "engine/serving_engine.hpp"

#include <spdlog/spdlog.h>

#include "engine/runtime_scheduler.hpp"
#include "actors/batch_tick_actor.hpp"
#include "actors/chip_session_actor.hpp"
#include "actors/device_actor.hpp"
#include "actors/kv_manager_actor.hpp"
#include "actors/request_actor.hpp"
#include "actors/sampler_actor.hpp"
#include "device/sim/cpu_backend.hpp"
#include "device/sim/reference_model.hpp"
#include "model/sampling/sampling.hpp"
#include "model/speculative/options.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace calserve::engine {

// Shared with the actors' callbacks (which may outlive a call into the engine).
struct serving_engine::registry {
    std::mutex mutex;
    std::unordered_map<std::string, actors::address<actors::request_actor>> by_id;
    std::unordered_map<actors::sequence_id, actors::address<actors::request_actor>> by_seq;
    std::unordered_map<std::string, actors::sequence_id> seq_of;
    std::atomic<std::int64_t> in_flight{0};

    actors::address<actors::request_actor> find(actors::sequence_id seq) {
        std::lock_guard lock(mutex);
        auto it = by_seq.find(seq);
        return it == by_seq.end() ? actors::address<actors::request_actor>{} : it->second;
    }
    void erase(const std::string& id) {
        std::lock_guard lock(mutex);
        if (auto it = seq_of.find(id); it != seq_of.end()) {
            by_seq.erase(it->second);
            seq_of.erase(it);
        }
        by_id.erase(id);
        in_flight.fetch_sub(1);
    }
};

struct serving_engine::watch {
    explicit watch(std::chrono::nanoseconds bound) : progress(bound) {}
    progress_watchdog progress;
    mailbox_watch mailboxes;
    std::atomic<bool> stall_logged{false};
};

namespace {

// The runner's head (calserve runner speculative) and the package presets' are top-64 too.
constexpr std::int64_t k_cpu_default_head_k = 64;

// The package's decode programs by batch size, ascending (one per size).
std::vector<actors::decode_profile> decode_profiles_of(const device::package_spec& spec) {
    std::vector<actors::decode_profile> out;
    for (const auto& sm : spec.submodels) {
        if (sm.kind != device::submodel_kind::decode) continue;
        if (std::any_of(out.begin(), out.end(), [&](const actors::decode_profile& p) { return p.batch == sm.batch; })) continue;
        out.push_back({std::max<std::int64_t>(1, sm.batch), sm.name});
    }
    std::sort(out.begin(), out.end(), [](const actors::decode_profile& a, const actors::decode_profile& b) { return a.batch < b.batch; });
    return out;
}

// The decode profiles a session uses and its rows per job: runtime.max_batch (0 or
// past the largest: the largest) rounded up to the profile that runs it (pick_profile);
// profiles above that one are never used.
result<std::vector<actors::decode_profile>> usable_profiles(const device::package_spec& spec, std::int64_t& max_batch) {
    auto profiles = decode_profiles_of(spec);
    if (!spec.first_of(device::submodel_kind::prefill) || profiles.empty() || profiles.front().batch != 1)
        return make_error(status::submodel_not_found, "package needs a prefill and a batch-1 decode submodel");
    if (max_batch <= 0 || max_batch > profiles.back().batch) max_batch = profiles.back().batch;
    std::vector<std::int64_t> batches;
    for (const auto& p : profiles) batches.push_back(p.batch);
    profiles.resize(*actors::pick_profile(batches, max_batch) + 1);
    return profiles;
}

actors::device_actor_options device_options_of(const config& cfg, std::string prefill_submodel,
                                       std::vector<actors::decode_profile> profiles,
                                       std::shared_ptr<device::fault_registry> faults) {
    actors::device_actor_options dopt;
    dopt.prefill_submodel = std::move(prefill_submodel);
    dopt.prefill_chunk = cfg.integer("runtime.prefill_chunk");
    dopt.prefill_chunk_target = std::chrono::nanoseconds(std::llround(cfg.number("runtime.prefill_chunk_ms") * 1e6));
    dopt.decode_profiles = std::move(profiles);
    dopt.wait_timeout = std::chrono::milliseconds(cfg.integer("device.wait_timeout_ms"));
    dopt.wait_cost_factor = cfg.number("device.wait_cost_factor");
    dopt.kv_apply_timeout = std::chrono::seconds(1);
    dopt.reset_limit = int(cfg.integer("device.reset_limit"));
    dopt.reset_backoff = std::chrono::milliseconds(cfg.integer("device.reset_backoff_ms"));
    dopt.reset_backoff_max = std::chrono::milliseconds(cfg.integer("device.reset_backoff_max_ms"));
    dopt.jitter_seed = std::uint64_t(cfg.integer("device.sim.seed"));
    dopt.faults = std::move(faults);
    dopt.check_threads = int(cfg.integer("runtime.sampler_threads"));
    dopt.sampling_head = cfg.boolean("device.sampling_head");
    return dopt;
}

actors::batch_tick_options tick_options_of(const config& cfg, std::int64_t max_batch, std::int64_t block_tokens) {
    actors::batch_tick_options bopt;
    bopt.max_inflight = int(cfg.integer("runtime.max_inflight"));
    bopt.max_running = cfg.integer("runtime.max_running");
    bopt.policy.prefill_budget = int(cfg.integer("runtime.prefill_budget"));
    bopt.policy.admit_window = std::chrono::microseconds(cfg.integer("runtime.admit_window_us"));
    bopt.kv_wait = std::chrono::milliseconds(cfg.integer("runtime.kv_wait_ms"));
    bopt.policy.max_batch = int(max_batch);
    bopt.policy.decode_groups = int(cfg.integer("runtime.decode_groups"));
    bopt.kv.policy = cfg.string("runtime.kv_policy") == "reserve" ? actors::kv_policy::reserve : actors::kv_policy::on_demand;
    bopt.kv.step_tokens = cfg.integer("runtime.kv_step_tokens");
    bopt.kv.block_tokens = block_tokens;
    bopt.max_job_retries = int(cfg.integer("runtime.max_job_retries"));
    bopt.prefix_cache = cfg.boolean("runtime.prefix_cache");
    bopt.chain_tokens = cfg.boolean("runtime.chain_tokens");
    bopt.speculative = model::speculative::speculative_options::from_config(cfg);
    return bopt;
}

// The drafting policy's cost of a position (docs/speculative.md): the device's price of a
// step of the rows with `drafts` drafts each against the plain step (the latency model on
// the simulator; the host's fitted step cost on the cpu backend, but not in a recordable
// daemon, whose trace holds no measured rate), else the fixed value.
std::function<double(std::int64_t, std::int64_t)> position_pricer(std::shared_ptr<device::device> dev, std::int64_t drafts) {
    drafts = std::max<std::int64_t>(1, drafts);
    return [weak = std::weak_ptr<device::device>(dev), drafts](std::int64_t rows, std::int64_t past) {
        const auto dev = weak.lock();
        if (!dev) return model::speculative::k_fixed_position_cost;
        const auto plain = dev->decode_cost(rows, 1, past), verify = dev->decode_cost(rows, 1 + drafts, past);
        return model::speculative::position_cost(double(plain.count()), double(verify.count()), drafts);
    };
}

// The top-k of the cpu backend's sampling head (docs/config.md `device.cpu_sampling_head`):
// as configured, or by default a top-64 head when drafting is on (drafts are verified by
// the head) and none otherwise (the cpu backend's plain serving as before).
std::int64_t cpu_head_k(const config& cfg) {
    const auto k = cfg.integer("device.cpu_sampling_head");
    if (k >= 0) return k;
    return cfg.string("runtime.speculative.method") != "none" ? k_cpu_default_head_k : 0;
}

// Forwards to the client's sink and tells the watchdog that tokens are flowing.
class progress_sink final : public actors::generation_sink {
public:
    progress_sink(std::shared_ptr<actors::generation_sink> inner, std::shared_ptr<serving_engine::watch> w, actors::runtime* rt)
        : inner_(std::move(inner)), watch_(std::move(w)), rt_(rt) {}
    void on_token(const actors::generated_token& token) override {
        watch_->progress.on_progress(rt_->now());
        inner_->on_token(token);
    }
    void on_finish(const actors::generation_result& result) override {
        watch_->progress.on_progress(rt_->now());
        inner_->on_finish(result);
    }

private:
    std::shared_ptr<actors::generation_sink> inner_;
    std::shared_ptr<serving_engine::watch> watch_;
    actors::runtime* rt_;
};

template <class A>
mailbox_probe probe_of(const actors::address<A>& a, std::string name) {
    return {std::move(name), [a] { auto p = a.lock(); return p ? p->mailbox_size() : std::size_t{0}; },
            [a] { auto p = a.lock(); return p ? p->delivered() : std::uint64_t{0}; }};
}

}  // namespace

serving_engine::~serving_engine() = default;

// Who asks which point: the device (sim or cpu backend) every device-level one, the
// sampler sampler_stall. client_stall belongs to the network layer, which declares
// it where its hook is wired (calserve serve); without one, arming it is refused.
void declare_engine_consumers(device::fault_registry& faults) {
    faults.set_consumers({});
    for (auto p : device::all_fault_points)
        if (p != device::fault_point::client_stall) faults.add_consumer(p);
}

void serving_engine::shutdown() {
    accepting_.store(false);
    watch_tick_.reset();
    actors::despawn(*rt_, tick_);
    actors::despawn(*rt_, session_);
    actors::despawn(*rt_, sampler_);
    actors::despawn(*rt_, kv_);
    actors::despawn(*rt_, device_actor_);
}

// Threaded mode only: a periodic check of the actors' mailboxes and of token
// progress, logged (the deterministic runtime is driven by tests, which must be
// able to run to idle).
void serving_engine::start_watch(std::chrono::nanoseconds interval) {
    std::weak_ptr<watch> weak = watch_;
    auto reg = registry_;
    auto* rt = rt_;
    auto tick = std::make_shared<std::function<void()>>();
    *tick = [weak, reg, rt, interval, tick_weak = std::weak_ptr<std::function<void()>>(tick)] {
        auto w = weak.lock();
        auto again = tick_weak.lock();
        if (!w || !again) return;
        for (const auto& name : w->mailboxes.check())
            spdlog::error("watchdog: actor '{}' has queued messages and delivered none for {} ms", name,
                          std::chrono::duration_cast<std::chrono::milliseconds>(interval).count());
        bool stalled = w->progress.stalled(rt->now(), reg->in_flight.load());
        if (stalled && !w->stall_logged.exchange(true))
            spdlog::error("watchdog: {} requests in flight and no token progress for {} ms: unhealthy",
                          reg->in_flight.load(),
                          std::chrono::duration_cast<std::chrono::milliseconds>(w->progress.since_progress(rt->now())).count());
        if (!stalled) w->stall_logged.store(false);
        rt->schedule_after(rt->context().get_executor(), interval, *again);
    };
    watch_tick_ = tick;
    rt_->schedule_after(rt_->context().get_executor(), interval, *tick);
}

result<std::unique_ptr<serving_engine>> serving_engine::create(actors::runtime& rt, const config& cfg, const engine_setup& setup) {
    std::unique_ptr<serving_engine> e(new serving_engine());
    if (auto r = e->build(rt, cfg, setup); !r) return r.error();
    return e;
}

void_result serving_engine::build(actors::runtime& rt, const config& cfg, const engine_setup& setup) {
    rt_ = &rt;
    metrics_ = setup.metrics;
    registry_ = std::make_shared<registry>();
    const bool cpu = !setup.model_dir.empty();
    if (auto r = open_device(cfg, setup); !r) return r;
    const device::package_spec& spec = device_->package();
    std::int64_t max_batch = cfg.integer("runtime.max_batch");
    auto profiles = usable_profiles(spec, max_batch);
    if (!profiles) return profiles.error();

    card_.name = setup.model_name.empty() ? (cpu ? setup.model_dir : setup.package_dir).filename().string() : setup.model_name;
    card_.usable_context = std::min({spec.context, cfg.integer("runtime.slot_context"), tokenizer_->model_max_length()});
    card_.vocab_size = spec.vocab_size;
    card_.max_prompt_bytes = tokenizer_->max_text_bytes(card_.usable_context - 1).value_or(0);
    card_.backend = cpu ? "cpu" : "sim";
    max_running_ = cfg.integer("runtime.max_running");
    max_queued_ = cfg.integer("runtime.max_queued");
    default_timeout_ms_ = cfg.integer("runtime.request_timeout_ms");

    const std::int64_t block_tokens = std::max<std::int64_t>(1, spec.kv.block_tokens);
    std::int64_t blocks = spec.kv.capacity_tokens() / block_tokens;
    if (auto cap = cfg.integer("runtime.kv_blocks"); cap > 0) blocks = std::min(blocks, cap);
    auto bopt = tick_options_of(cfg, max_batch, block_tokens);
    // Chaining needs the device to draw the rows: a package with a sampling head, and the head on.
    const bool head = spec.sampling_head_k > 0 && cfg.boolean("device.sampling_head");
    bopt.chain_tokens = bopt.chain_tokens && head;
    if (!head) bopt.speculative = {};  // drafts are verified by the head: without one, nothing drafts
    if (bopt.speculative.policy.enabled) bopt.position_cost = position_pricer(device_, bopt.speculative.policy.max_drafts);
    cache_identity_ = spec.name + "|" + spec.reference_model_dir.string();
    spawn_actors(device_options_of(cfg, spec.first_of(device::submodel_kind::prefill)->name, *profiles, faults_), bopt,
                 actors::kv_cache_options{bopt.prefix_cache, cfg.integer("runtime.prefix_cache_block")}, blocks, block_tokens,
                 int(cfg.integer("runtime.sampler_threads")));
    watch_ = std::make_shared<watch>(std::chrono::milliseconds(cfg.integer("runtime.progress_timeout_ms")));
    watch_->mailboxes.add(probe_of(device_actor_, "device"));
    watch_->mailboxes.add(probe_of(kv_, "kv_manager"));
    watch_->mailboxes.add(probe_of(tick_, "batch_tick"));
    watch_->mailboxes.add(probe_of(session_, "chip_session"));
    watch_->mailboxes.add(probe_of(sampler_, "sampler"));
    if (rt.mode() == actors::run_mode::threaded && watch_->progress.bound().count() > 0)
        start_watch(std::max<std::chrono::nanoseconds>(watch_->progress.bound() / 2, std::chrono::milliseconds(100)));
    std::string batches;
    for (const auto& p : *profiles) batches += (batches.empty() ? "" : ",") + std::to_string(p.batch);
    spdlog::info("engine: model '{}' on {} backend, usable context {}, KV {} blocks of {} tokens ({}), max_inflight {}, "
                 "decode batches {} (max_batch {}), sampling head {}, token chaining {}, speculative {}",
                 card_.name, card_.backend, card_.usable_context, blocks, block_tokens, cfg.string("runtime.kv_policy"),
                 bopt.max_inflight, batches, max_batch,
                 head ? "top-k " + std::to_string(spec.sampling_head_k) : std::string(spec.sampling_head_k > 0 ? "off" : "none"),
                 bopt.chain_tokens ? "on" : "off", model::speculative::to_string(bopt.speculative.drafter.kind));
    return {};
}

// The fault registry (the board's, or the engine's own), the device with its package
// loaded and configured (parameters in place), and the package's tokenizer.
void_result serving_engine::open_device(const config& cfg, const engine_setup& setup) {
    scheduler_ = std::make_unique<runtime_scheduler>(*rt_);
    if (setup.faults) {
        faults_ = setup.faults;  // consumers declared by whoever made it
    } else {
        faults_ = std::make_shared<device::fault_registry>(std::uint64_t(cfg.integer("device.sim.seed")));
        declare_engine_consumers(*faults_);
    }
    auto dev = !setup.model_dir.empty() ? device::sim::open_cpu_device(setup.model_dir, cfg, *scheduler_, faults_, cpu_head_k(cfg))
                                        : device::sim::open_sim_device(setup.package_dir, cfg, *scheduler_, faults_);
    if (!dev) return dev.error();
    device_ = *dev;
    const auto& model_dir = device_->package().reference_model_dir;
    auto tok = model::tokenizer::load(model_dir);
    if (!tok) return make_error(tok.code(), "tokenizer of " + model_dir.string() + ": " + tok.error().message);
    tokenizer_ = *tok;
    for (auto id : tokenizer_->eos_token_ids()) eos_ids_.push_back(id);
    return {};
}

// The five session actors, wired, with the device starting up.
void serving_engine::spawn_actors(actors::device_actor_options dopt, actors::batch_tick_options bopt, actors::kv_cache_options cache,
                                  std::int64_t kv_blocks,
                                  std::int64_t block_tokens, int sampler_threads) {
    actors::sampler_options sopt;
    sopt.threads = sampler_threads;
    sopt.faults = faults_;
    auto& rt = *rt_;
    auto reg = registry_;
    device_actor_ = spawn<actors::device_actor>(rt, device_, std::move(dopt), metrics_);
    kv_ = spawn<actors::kv_manager_actor>(rt, kv_blocks, block_tokens, metrics_, cache);
    tick_ = spawn<actors::batch_tick_actor>(rt, std::move(bopt), metrics_);
    session_ = spawn<actors::chip_session_actor>(rt, [reg](actors::sequence_id s) { return reg->find(s); }, metrics_);
    sampler_ = spawn<actors::sampler_actor>(rt, sopt, metrics_);
    journal_ = std::make_shared<actors::engine_journal>();
    device_actor_.lock()->set_journal(journal_);
    session_.lock()->set_journal(journal_);
    device_actor_.lock()->wire(session_, kv_);
    tick_.lock()->wire(session_, kv_);
    kv_.lock()->wire(device_actor_);
    session_.lock()->wire(tick_, device_actor_, sampler_);
    sampler_.lock()->wire(session_);
    (void)device_actor_.tell(actors::da_start{});
}

void_result serving_engine::submit(actors::generation_request request, std::shared_ptr<actors::generation_sink> sink) {
    // Admission at the door (plan_door); its refusals keep their place among the
    // request's own checks: dead, draining, the request, context, sampling, in flight.
    const std::int64_t need = std::int64_t(request.prompt.size()) + request.max_tokens;
    const auto door = actors::plan_door(door_admission(std::int64_t(request.prompt.size()), request.max_tokens));
    if (door.reason == status::device_dead) return make_error(status::device_dead, "the device is dead");
    if (door.reason == status::not_ready) return make_error(status::not_ready, "server is draining");
    if (request.prompt.empty()) return make_error(status::invalid_argument, "prompt: must not be empty");
    for (auto t : request.prompt)
        if (t < 0 || t >= card_.vocab_size)
            return make_error(status::invalid_argument, "prompt: token id " + std::to_string(t) + " outside the vocabulary");
    if (request.max_tokens < 1) return make_error(status::invalid_argument, "max_tokens: must be at least 1");
    if (door.reason == status::context_overflow)
        return make_error(status::context_overflow,
                          "prompt (" + std::to_string(request.prompt.size()) + " tokens) + max_tokens (" +
                              std::to_string(request.max_tokens) + ") exceeds the usable context of " +
                              std::to_string(card_.usable_context) + " tokens");
    if (auto v = model::validate(request.sampling, std::size_t(card_.vocab_size)); !v) return v.error();
    if (door.reason == status::queue_full) return make_error(status::queue_full, "too many requests in flight");

    auto seq = std::make_shared<actors::sequence_state>();
    seq->seq = ++next_seq_;
    seq->request_id = request.id;
    seq->tokens = std::move(request.prompt);
    seq->prompt_len = std::int64_t(seq->tokens.size());
    seq->max_tokens = request.max_tokens;
    seq->full_tokens = need;  // the BatchTick sets kv_tokens (the reservation) by runtime.kv_policy
    seq->params = std::move(request.sampling);
    seq->rng = model::request_rng(model::request_rng::derive_seed(seq->params.seed, seq->seq));
    seq->arrived = rt_->now();
    seq->scope = actors::cache_scope(cache_identity_, request.cache_salt);
    if (request.score_top_n > std::int32_t(model::max_top_logprobs))
        return make_error(status::invalid_argument, "prompt scoring asks for more than " +
                                                        std::to_string(model::max_top_logprobs) + " alternatives");
    seq->score_top_n = std::max<std::int32_t>(-1, request.score_top_n);
    if (seq->scoring()) seq->prompt_scores.resize(std::size_t(seq->prompt_len));
    if (request.constraint.active()) {
        auto c = make_constraint(request.constraint);
        if (!c) return c.error();
        seq->constraint = std::move(*c);
    }

    actors::request_setup rs;
    rs.seq = seq;
    rs.sink = std::make_shared<progress_sink>(std::move(sink), watch_, rt_);
    rs.tokenizer = tokenizer_;
    rs.stop = std::move(request.stop);
    rs.stop_ids = std::move(request.stop_token_ids);
    if (!request.ignore_eos) rs.stop_ids.insert(rs.stop_ids.end(), eos_ids_.begin(), eos_ids_.end());
    seq->stop_ids = rs.stop_ids;
    seq->stop_strings = !rs.stop.empty();
    auto ms = request.timeout.count() > 0 ? request.timeout.count() : default_timeout_ms_;
    rs.timeout = std::chrono::milliseconds(ms);
    rs.tick = tick_;
    auto reg = registry_;
    rs.on_terminal = [reg](const std::string& id, actors::request_state) { reg->erase(id); };

    auto addr = spawn<actors::request_actor>(*rt_, std::move(rs), metrics_);
    {
        std::lock_guard lock(registry_->mutex);
        if (registry_->by_id.contains(request.id)) {
            actors::despawn(*rt_, addr);
            return make_error(status::invalid_argument, "request id already in use: " + request.id);
        }
        registry_->by_id[request.id] = addr;
        registry_->by_seq[seq->seq] = addr;
        registry_->seq_of[request.id] = seq->seq;
        watch_->progress.on_admitted(rt_->now(), registry_->in_flight.fetch_add(1) == 0);
    }
    (void)addr.tell(actors::rq_start{});
    return {};
}

// The door bounds the requests in flight (running or waiting in the BatchTick) to
// max_running + max_queued.
actors::door_input serving_engine::door_admission(std::int64_t prompt, std::int64_t max_tokens) const {
    actors::door_input in;
    in.in_flight = registry_->in_flight.load();
    in.max_in_flight = max_running_ + max_queued_;
    in.fits_context = actors::fits_context(prompt, max_tokens, card_.usable_context);
    in.accepting = accepting_.load();
    in.device_dead = device_state() == device::device_health::dead;
    return in;
}

std::optional<std::uint64_t> serving_engine::sequence_of(const std::string& request_id) const {
    std::lock_guard lock(registry_->mutex);
    auto it = registry_->seq_of.find(request_id);
    if (it == registry_->seq_of.end()) return std::nullopt;
    return it->second;
}

void serving_engine::cancel(const std::string& request_id) {
    actors::address<actors::request_actor> addr;
    {
        std::lock_guard lock(registry_->mutex);
        if (auto it = registry_->by_id.find(request_id); it != registry_->by_id.end()) addr = it->second;
    }
    (void)addr.tell(actors::rq_cancel{});
}

std::int64_t serving_engine::in_flight() const { return registry_->in_flight.load(); }

device::device_health serving_engine::device_state() const {
    auto d = device_actor_.lock();
    return d ? d->health() : device::device_health::dead;
}

actors::engine_health serving_engine::health() const {
    actors::engine_health h;
    auto state = device_state();
    h.device_state = std::string(to_string(state));
    h.ready = accepting_.load() && (state == device::device_health::ready || state == device::device_health::busy);
    h.running = registry_->in_flight.load();
    h.healthy = state != device::device_health::dead && !watch_->progress.stalled(rt_->now(), h.running);
    if (auto t = tick_.lock()) h.waiting = std::int64_t(t->pending());
    return h;
}

result<std::vector<actors::token_id>> serving_engine::encode(std::string_view text) const { return tokenizer_->encode(text); }

result<std::vector<actors::token_id>> serving_engine::encode_prompt(std::string_view text, std::int64_t max_tokens) const {
    return tokenizer_->encode(text, max_tokens);
}

result<std::string> serving_engine::decode(const std::vector<actors::token_id>& ids) const { return tokenizer_->decode(ids); }

result<std::string> serving_engine::apply_chat_template(const std::vector<actors::chat_message>& messages,
                                                        const actors::chat_options& options) const {
    return tokenizer_->apply_chat_template(messages, options);
}

result<std::shared_ptr<const model::grammar::compiled>> serving_engine::compile_grammar(model::grammar::grammar_kind kind,
                                                                                       std::string_view text) const {
    std::call_once(grammar_once_, [this] {
        // Added tokens that decode as plain text (Qwen3's <tool_call>, </tool_call>,
        // <think>, </think>: "special": false) may spell grammar text, so a model can
        // write a tool call with the single token it was trained on.
        std::vector<actors::token_id> text_added;
        for (auto id : tokenizer_->added_token_ids())
            if (!tokenizer_->is_special(id)) text_added.push_back(id);
        grammar_cache_ = std::make_unique<model::grammar::compile_cache>(
            model::grammar::vocabulary::build(*tokenizer_, eos_ids_, text_added));
    });
    return grammar_cache_->get(kind, text);
}

// The per-sequence state of a constraint; compiles the grammar when the request
// comes without it (a replayed trace records kind and text only).
result<std::unique_ptr<actors::sequence_constraint>> serving_engine::make_constraint(actors::output_constraint& c) const {
    auto out = std::make_unique<actors::sequence_constraint>();
    if (c.has_grammar()) {
        if (!c.compiled) {
            auto g = compile_grammar(c.kind, c.grammar);
            if (!g) return g.error();
            c.compiled = std::move(*g);
        }
        out->matcher = std::make_unique<model::grammar::matcher>(c.compiled);
    }
    out->thinking = c.thinking;
    out->reasoning_budget = c.max_reasoning_tokens;
    if (auto id = tokenizer_->token_to_id("</think>")) out->think_end = *id;
    return out;
}

void serving_engine::reset_device(std::string reason) { (void)device_actor_.tell(actors::da_reset{std::move(reason)}); }

void serving_engine::clear_prefix_cache() { (void)kv_.tell(actors::kv_drop_cache{true}); }

std::shared_ptr<device::fault_registry> serving_engine::faults() const { return faults_; }

const actors::kv_manager_actor& serving_engine::kv_manager() const { return *kv_.lock(); }
const actors::batch_tick_actor& serving_engine::batch_tick() const { return *tick_.lock(); }
std::chrono::nanoseconds serving_engine::now() const { return rt_->now(); }

std::uint64_t serving_engine::device_resets() const {
    auto d = device_actor_.lock();
    return d ? d->resets() : 0;
}

}  // namespace calserve::engine
