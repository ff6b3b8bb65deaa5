// Seeded soak traffic and trace replay (see soak.hpp).
#include "soak/soak.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>
#include <ostream>
#include <random>

#include "io/trace_writer.hpp"

namespace calserve::soak {
namespace {

// Everything a seed decides, printed at the start of a run.
struct plan {
    double mean_burst_gap_s = 0;   // open-loop bursts: mean time between bursts
    int max_burst = 0;             // requests per burst, 1..max_burst
    double mean_gap_ms = 0;        // mean inter-arrival time inside a burst
    int max_prompt = 0, max_new = 0;
    double greedy_share = 0, cancel_share = 0, deadline_share = 0, eos_share = 0;
    double disconnect_share = 0, slow_share = 0;  // clients that vanish mid-stream / read slowly
    double mean_fault_gap_s = 0;   // mean time between fault arms
    // KV reuse, drawn from a generator of its own so the rest of a seed's plan and
    // requests stay as they were: the share of prompts that start with one of a few
    // shared stems (prefix cache hits), and the prefill chunk.
    double stem_share = 0;
    // Speculative decoding (drafting seeds only, a generator of its own again): the share
    // of prompts that repeat a span of themselves, answered with longer outputs, so n-gram
    // lookup finds drafts and verify rows form (add_speculative_plan).
    double repeat_share = 0;
    std::vector<std::string> overrides;
};

// Drafting seeds' repeating prompts: a span of 4-12 tokens, 3-5 times (at most 60
// tokens), answered with 32-96 tokens.
constexpr int k_repeat_prompt_max = 60, k_repeat_new_max = 96;

const char* const k_fault_points[] = {"wait_timeout", "ccu_exception", "device_lost", "logits_nan", "d2h_error",
                                      "submit_busy", "kv_alloc_fail", "h2d_error", "slow_infer", "submit_error"};

plan make_plan(std::mt19937_64& rng) {
    auto pick = [&](std::initializer_list<int> xs) { return *(xs.begin() + rng() % xs.size()); };
    std::uniform_real_distribution<double> u(0, 1);
    plan p;
    p.mean_burst_gap_s = 3 + 12 * u(rng);
    p.max_burst = pick({2, 6, 12, 24});
    p.mean_gap_ms = 2 + 60 * u(rng);
    p.max_prompt = pick({8, 24, 64});
    p.max_new = pick({4, 12, 32});
    p.greedy_share = 0.3 + 0.5 * u(rng);
    p.cancel_share = 0.2 * u(rng);
    p.deadline_share = 0.2 * u(rng);
    p.eos_share = 0.2 * u(rng);
    p.disconnect_share = 0.15 * u(rng);
    p.slow_share = 0.2 * u(rng);
    p.mean_fault_gap_s = 0.5 + 10 * u(rng);
    p.overrides = {"runtime.max_running=" + std::to_string(pick({2, 4, 8, 16})),
                   "runtime.max_queued=" + std::to_string(pick({4, 16, 64})),
                   "runtime.max_inflight=" + std::to_string(pick({1, 2})),
                   "runtime.prefill_budget=" + std::to_string(pick({1, 2, 4})),
                   "runtime.kv_wait_ms=" + std::to_string(pick({50, 500, 5000})),
                   "device.wait_timeout_ms=" + std::to_string(pick({200, 1000, 3000})),
                   "device.reset_limit=" + std::to_string(pick({5, 6})),
                   "device.sim.model_threads=1",
                   // Paced steps make streams take virtual time, so cancels, deadlines and slow
                   // consumers land mid-stream; 0 = a job completes when its numbers exist.
                   // 0 means "unpaced" on the cpu backend and "the latency model" (-1) on a package.
                   "device.sim.step_ms=" + [](int v) { return v == 0 ? std::string("-1") : std::to_string(v); }(pick({0, 1, 4, 15})),
                   "device.sim.d2h_ms=" + std::to_string(pick({0, 1, 2}))};
    // Batching and KV: decode batches up to 1, 4 or 16 rows; on-demand KV (sometimes capped so
    // that running sequences are preempted and re-prefilled) or the whole sequence reserved.
    const bool on_demand = u(rng) < 0.75;
    p.overrides.push_back("runtime.max_batch=" + std::to_string(pick({1, 4, 16})));
    p.overrides.push_back(std::string("runtime.kv_policy=") + (on_demand ? "on_demand" : "reserve"));
    p.overrides.push_back("runtime.kv_step_tokens=" + std::to_string(pick({8, 16, 64})));
    p.overrides.push_back("device.sim.kv_block_tokens=16");
    // Capped: room for one or two of the longest sequences and a block, so that several
    // running sequences growing together must preempt (16-token blocks).
    const int longest = (p.max_prompt + p.max_new + 15) / 16;
    p.overrides.push_back("runtime.kv_blocks=" + std::to_string(pick({0, longest + 1, 2 * longest + 1})));
    return p;
}

// The KV-reuse part of a plan: cache-heavy (most prompts share stems) or light, the
// prefix cache in 16-token blocks (so short soak prompts hit) or off, prefill chunks.
void add_reuse_plan(plan& p, std::uint64_t seed) {
    std::mt19937_64 rng(seed * 0xD1B54A32D192ED03ull + 7);
    auto pick = [&](std::initializer_list<int> xs) { return *(xs.begin() + rng() % xs.size()); };
    p.stem_share = pick({0, 1, 2, 3}) / 4.0 + 0.2;
    const bool cache = rng() % 5 != 0;
    p.overrides.push_back(std::string("runtime.prefix_cache=") + (cache ? "true" : "false"));
    p.overrides.push_back("runtime.prefix_cache_block=16");
    const int chunk = pick({0, 8, 24, 512});
    p.overrides.push_back("runtime.prefill_chunk=" + std::to_string(chunk));
    // Soak prompts are short: the priced budget (runtime.prefill_chunk_ms) would feed them
    // whole, so the small chunks are fixed token counts and 512 keeps the priced default.
    if (chunk != 512) p.overrides.push_back("runtime.prefill_chunk_ms=0");
    // A capped KV keeps room for the longest prompt with a whole stem (40 tokens, 3 blocks).
    for (auto& o : p.overrides)
        if (o.starts_with("runtime.kv_blocks=") && o != "runtime.kv_blocks=0")
            o = "runtime.kv_blocks=" + std::to_string(std::stoi(o.substr(18)) + 3);
}

// Speculative decoding (docs/speculative.md), from a generator of its own so the rest of a
// seed's plan stays as it was: on a package (sampling head, latency model) about half the
// seeds draft, with draft lengths and batch bounds that make verify rows share batches
// with plain rows, and a share of requests whose prompts repeat a span and whose outputs
// run long enough for the policy to draft and verify (a capped KV gets room for one such
// sequence); the cpu-backend seeds keep their recorded behaviour (docs/soak.md).
void add_speculative_plan(plan& p, std::uint64_t seed, bool on_package) {
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 38);
    auto pick = [&](std::initializer_list<int> xs) { return *(xs.begin() + rng() % xs.size()); };
    if (!on_package || rng() % 2 != 0) return;
    p.overrides.push_back("runtime.speculative.method=ngram");
    p.overrides.push_back("runtime.speculative.draft_tokens=" + std::to_string(pick({2, 4, 7})));
    p.overrides.push_back("runtime.speculative.max_batch=" + std::to_string(pick({4, 16})));
    p.repeat_share = pick({1, 2, 3}) / 4.0;
    const int room = (k_repeat_prompt_max + k_repeat_new_max + 15) / 16;
    for (auto& o : p.overrides)
        if (o.starts_with("runtime.kv_blocks=") && o != "runtime.kv_blocks=0")
            o = "runtime.kv_blocks=" + std::to_string(std::stoi(o.substr(18)) + room);
}

void print_plan(const plan& p, const soak_options& o, std::ostream& out) {
    out << "soak: seed=" << o.seed << " duration=" << double(o.duration_ns) / 1e9 << "s "
        << (o.package_dir.empty() ? "model=" + o.model_dir.string() : "package=" + o.package_dir.string())
        << "\n  mean_burst_gap_s=" << p.mean_burst_gap_s << " max_burst=" << p.max_burst
        << " mean_gap_ms=" << p.mean_gap_ms << " max_prompt=" << p.max_prompt << " max_new=" << p.max_new
        << " greedy_share=" << p.greedy_share << " cancel_share=" << p.cancel_share
        << " deadline_share=" << p.deadline_share << " eos_share=" << p.eos_share
        << " disconnect_share=" << p.disconnect_share << " slow_share=" << p.slow_share
        << " stem_share=" << p.stem_share << " repeat_share=" << p.repeat_share
        << " mean_fault_gap_s=" << p.mean_fault_gap_s << "\n  config:";
    for (const auto& ov : p.overrides) out << " " << ov;
    out << std::endl;  // long runs: show the plan before the hours of work
}

// One generated input; a submit may come with a slow consumer. `paired`: the second arm
// of a pair (below), applied even while the first is live.
struct generated {
    io::trace_input input;
    std::optional<consumer_model> consumer;
    bool paired = false;
};

// Lazily generated, time-ordered inputs: arrivals, their cancels and disconnects,
// fault arms, and a final clear.
class traffic {
public:
    traffic(const plan& p, std::uint64_t seed, std::int64_t duration_ns, std::int64_t vocab)
        : p_(p), rng_(seed * 0x9E3779B97F4A7C15ull + 1), duration_(duration_ns),
          vocab_(std::min<std::int64_t>(vocab, 150000)), burst_rng_(seed * 0xBF58476D1CE4E5B9ull + 11),
          stem_rng_(seed * 0x94D049BB133111EBull + 5), pair_rng_(seed * 0x2545F4914F6CDD1Dull + 13),
          repeat_rng_(seed * 0xA0761D6478BD642Full + 38) {
        // Three stems: a shared system prompt, two agents.
        for (auto& stem : stems_)
            for (int i = 0; i < k_stem_tokens; ++i) stem.push_back(std::int32_t(stem_rng_() % std::uint64_t(vocab_)));
        next_arrival_ = gap(p_.mean_burst_gap_s * 1e9);
        burst_left_ = between(1, p_.max_burst);
        next_arm_ = gap(p_.mean_fault_gap_s * 1e9);
    }

    std::optional<generated> next() {
        std::int64_t t_cancel = cancels_.empty() ? INT64_MAX : cancels_.begin()->first;
        std::int64_t t_clear = burst_ends_.empty() ? INT64_MAX : burst_ends_.begin()->first;
        std::int64_t t_pair = pairs_.empty() ? INT64_MAX : pairs_.begin()->first;
        std::int64_t t = std::min({next_arrival_, next_arm_, t_cancel, t_clear, t_pair});
        if (t >= duration_) {
            if (cleared_) return std::nullopt;
            cleared_ = true;
            return generated{io::trace_clear{duration_, std::nullopt, std::nullopt}, std::nullopt};
        }
        if (t == t_clear) {
            io::trace_clear c{t, burst_ends_.begin()->second, std::nullopt};
            burst_ends_.erase(burst_ends_.begin());
            return generated{c, std::nullopt};
        }
        if (t == t_pair) {
            auto second = pairs_.begin()->second;
            pairs_.erase(pairs_.begin());
            return generated{second, std::nullopt, true};
        }
        if (t == t_cancel) {
            io::trace_cancel c{t, cancels_.begin()->second};
            cancels_.erase(cancels_.begin());
            return generated{c, std::nullopt};
        }
        if (t == next_arm_) {
            next_arm_ = t + gap(p_.mean_fault_gap_s * 1e9);
            auto arm = make_arm(t);
            make_burst(arm);
            make_pair(arm);
            return generated{std::move(arm), std::nullopt};
        }
        if (--burst_left_ > 0) {
            next_arrival_ = t + gap(p_.mean_gap_ms * 1e6);
        } else {
            next_arrival_ = t + gap(p_.mean_burst_gap_s * 1e9);
            burst_left_ = between(1, p_.max_burst);
        }
        return make_submit(t);
    }

private:
    std::int64_t gap(double mean_ns) {
        return std::max<std::int64_t>(1, std::int64_t(std::exponential_distribution<double>(1.0 / mean_ns)(rng_)));
    }
    double unit() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
    std::int64_t between(std::int64_t lo, std::int64_t hi) { return lo + std::int64_t(rng_() % std::uint64_t(hi - lo + 1)); }

    generated make_submit(std::int64_t t) {
        io::trace_submit s;
        s.t_ns = t;
        s.id = std::to_string(++requests_).insert(0, 1, 'r');
        auto len = between(1, p_.max_prompt);
        for (std::int64_t i = 0; i < len; ++i) s.prompt.push_back(std::int32_t(between(0, vocab_ - 1)));
        // A prompt that starts with 16-40 tokens of a stem, then its own tokens (drawn as
        // before: the main generator advances exactly as without stems).
        if (double(stem_rng_() % 1000) / 1000.0 < p_.stem_share) {
            const auto& stem = stems_[stem_rng_() % stems_.size()];
            const auto shared = std::ptrdiff_t(16 + stem_rng_() % (k_stem_tokens - 15));
            s.prompt.insert(s.prompt.begin(), stem.begin(), stem.begin() + shared);
        }
        s.max_tokens = between(1, p_.max_new);
        repeat_span(s);
        s.ignore_eos = unit() >= p_.eos_share;
        if (unit() >= p_.greedy_share) {
            s.temperature = 0.3 + 1.2 * unit();
            s.top_p = 0.5 + 0.5 * unit();
            s.top_k = std::int32_t(between(0, 2) * 20);
            s.seed = rng_() >> 1;
        }
        if (unit() < p_.deadline_share) s.timeout_ms = between(1, 400);
        if (unit() < p_.cancel_share) cancels_.emplace(t + between(0, 300'000'000), s.id);
        // A client that vanishes: the network layer cancels when it sees the socket close,
        // at any point of a stream that may last max_tokens paced steps.
        if (unit() < p_.disconnect_share) cancels_.emplace(t + between(0, s.max_tokens * 20'000'000), s.id);
        std::optional<consumer_model> consumer;
        if (unit() < p_.slow_share) consumer = consumer_model{double(between(1, 60)), between(1, 8)};
        return generated{s, consumer};
    }

    // Drafting seeds: a share of prompts become a span of their own tokens repeated, with a
    // longer output (drawn from a generator of its own, so the main one advances as before),
    // so the sequence's tokens repeat and n-gram lookup drafts.
    void repeat_span(io::trace_submit& s) {
        if (p_.repeat_share <= 0 || double(repeat_rng_() % 1000) / 1000.0 >= p_.repeat_share) return;
        const auto span_len = std::size_t(4 + repeat_rng_() % 9);
        std::vector<std::int32_t> span;
        for (std::size_t i = 0; i < span_len; ++i)
            span.push_back(i < s.prompt.size() ? s.prompt[i] : std::int32_t(repeat_rng_() % std::uint64_t(vocab_)));
        const auto copies = 3 + repeat_rng_() % 3;
        s.prompt.clear();
        for (std::uint64_t c = 0; c < copies; ++c) s.prompt.insert(s.prompt.end(), span.begin(), span.end());
        s.max_tokens = std::int64_t(32 + repeat_rng_() % (k_repeat_new_max - 31));
    }

    // A quarter of the arms (drawn from their own generator, so the requests of a
    // seed stay as they were) become a fault burst: a device fault on every job for
    // 1-8 ms of virtual time, then cleared. Without the DeviceActor's reset backoff a
    // burst used to exhaust device.reset_limit within its few ms and kill the device.
    void make_burst(io::trace_arm& arm) {
        static const char* const k_burst_points[] = {"ccu_exception", "d2h_error", "device_lost"};
        if (burst_rng_() % 4 != 0) return;
        arm.point = k_burst_points[burst_rng_() % std::size(k_burst_points)];
        arm.mode = "always";
        arm.count = 0;
        arm.delay_ms = 0;
        const auto length_ns = std::int64_t(1 + burst_rng_() % 8) * 1'000'000;
        burst_ends_.emplace(arm.t_ns + length_ns, arm.point);
    }

    // A quarter of the other arms (their own generator again) become a pair: refusals
    // (submit_busy, the jobs' retry backoff, or kv_alloc_fail) and, 0-4 ms later, a device fault
    // armed beside them. A job refused before the fault is retried after it, on a device the
    // reset emptied, and the fault may land in the reset's warm-up and golden check: the
    // interleavings of retries, resets and re-prefills that single arms never reach.
    void make_pair(io::trace_arm& arm) {
        static const char* const k_first[] = {"submit_busy", "submit_busy", "kv_alloc_fail"};
        static const char* const k_second[] = {"wait_timeout", "ccu_exception", "device_lost",
                                               "logits_nan",   "d2h_error",     "h2d_error"};
        if (arm.mode == "always" || pair_rng_() % 4 != 0) return;
        arm.point = k_first[pair_rng_() % std::size(k_first)];
        arm.mode = "count";
        arm.count = std::int64_t(1 + pair_rng_() % 3);
        arm.delay_ms = 0;
        io::trace_arm second;
        second.t_ns = arm.t_ns + std::int64_t(pair_rng_() % 4'000'001);
        second.point = k_second[pair_rng_() % std::size(k_second)];
        second.mode = pair_rng_() % 2 == 0 ? "once" : "count";
        second.count = second.mode == "once" ? 1 : 2;
        pairs_.emplace(second.t_ns, second);
    }

    io::trace_arm make_arm(std::int64_t t) {
        io::trace_arm a;
        a.t_ns = t;
        a.point = k_fault_points[rng_() % std::size(k_fault_points)];
        // once or a few shots: an unbounded arm (probability, always) could fail every reset and
        // kill the device, which is correct behaviour but ends the soak's usefulness.
        if (rng_() % 2 == 0) a.mode = "once";
        else a.mode = "count", a.count = between(2, 3);
        if (a.point == "slow_infer") a.delay_ms = double(between(1, 200));
        return a;
    }

    plan p_;
    std::mt19937_64 rng_;
    std::int64_t duration_, vocab_;
    std::int64_t next_arrival_ = 0, next_arm_ = 0;
    std::uint64_t requests_ = 0;
    std::int64_t burst_left_ = 0;
    std::multimap<std::int64_t, std::string> cancels_;
    std::mt19937_64 burst_rng_;
    std::multimap<std::int64_t, std::string> burst_ends_;  // clear time -> point of a fault burst
    static constexpr int k_stem_tokens = 40;
    std::mt19937_64 stem_rng_;
    std::array<std::vector<std::int32_t>, 3> stems_;
    std::mt19937_64 pair_rng_;
    std::multimap<std::int64_t, io::trace_arm> pairs_;  // the second arm of a pair, by time
    std::mt19937_64 repeat_rng_;
    bool cleared_ = false;
};

// Generation switches under the traffic (soak_options::generations): from a generator of
// their own, every 1-6 virtual seconds, alternately a load of the same model as a new
// generation kept resident beside the serving one and a rollback to the kept one. An op
// due while a load or rollback still runs its steps waits for it to end.
class generation_ops {
public:
    generation_ops(std::uint64_t seed, std::string alias, std::string dir)
        : rng_(seed * 0xA0761D6478BD642Full + 17), alias_(std::move(alias)), dir_(std::move(dir)) {
        next_ = gap();
    }
    std::int64_t next_ns() const { return next_; }
    // The op due at next_ns(); the one after it is due a gap later.
    io::trace_model take() {
        io::trace_model m;
        m.t_ns = next_;
        m.alias = alias_;
        m.op = load_next_ ? "load" : "rollback";
        if (load_next_) {
            m.dir = dir_;
            m.keep = true;
        }
        load_next_ = !load_next_;
        next_ += gap();
        return m;
    }
    void postpone(std::int64_t to_ns) { next_ = to_ns; }

private:
    std::int64_t gap() { return std::int64_t(1'000'000'000 + rng_() % 5'000'000'000ull); }
    std::mt19937_64 rng_;
    std::string alias_, dir_;
    std::int64_t next_ = 0;
    bool load_next_ = true;
};

// The next generation op, at its time (recorded like any input); while a load or rollback
// still runs its steps it waits 100 ms (virtual) at a time.
void apply_generation_op(simulation& s, generation_ops& ops, io::trace_writer* writer) {
    s.advance_to(ops.next_ns());
    if (s.generation_busy()) return ops.postpone(ops.next_ns() + 100'000'000);
    const io::trace_input in = ops.take();
    if (writer) std::visit([&](const auto& r) { writer->push(io::encode(r)); }, in);
    s.apply(in);
}

// One soak pass; `writer` may be null (no trace).
result<sim_report> soak_pass(const soak_options& o, const plan& p, io::trace_writer* writer) {
    sim_setup setup;
    setup.model_dir = o.model_dir;
    setup.package_dir = o.package_dir;
    setup.overrides = p.overrides;
    setup.check_reference = o.check_reference;
    setup.operator_model = true;
    message_observer obs;
    if (writer) obs = [writer](const io::trace_message& m) { writer->push(io::encode(m)); };
    input_observer own_inputs;  // slow consumers' cancels, recorded like any other input
    if (writer) own_inputs = [writer](const io::trace_input& in) {
        std::visit([&](const auto& r) { writer->push(io::encode(r)); }, in);
    };
    fire_observer fires;
    if (writer) fires = [writer](const io::trace_fire& f) { writer->push(io::encode(f)); };
    auto sim = simulation::create(setup, obs, own_inputs, fires);
    if (!sim) return sim.error();
    auto& s = **sim;
    if (writer) {
        io::trace_header h;
        h.source = "soak";
        h.seed = o.seed;
        h.model_dir = o.model_dir.string();
        h.package_dir = o.package_dir.string();
        h.overrides = p.overrides;
        h.duration_ns = o.duration_ns;
        writer->push(io::encode(h));
    }
    traffic gen(p, o.seed, o.duration_ns, s.vocab_size());
    std::optional<generation_ops> ops;
    if (o.generations)
        ops.emplace(o.seed, s.alias(), std::filesystem::absolute(o.package_dir.empty() ? o.model_dir : o.package_dir).string());
    while (auto g = gen.next()) {
        const auto& in = g->input;
        while (ops && ops->next_ns() <= io::input_time(in) && ops->next_ns() < o.duration_ns && s.report().ok())
            apply_generation_op(s, *ops, writer);
        // Reach the input's time first: slow consumers that overflow on the way are
        // cancelled (and recorded) then, so the trace's inputs stay in time order.
        s.advance_to(io::input_time(in));
        // One live arm at a time: overlapping arms could fail more consecutive resets than
        // device.reset_limit allows, a correct death that would end the soak's coverage.
        if (std::holds_alternative<io::trace_arm>(in) && s.faults_armed() && !g->paired) continue;
        if (writer) {
            // File order between inputs and messages is informative only: replay reads them as two streams.
            std::visit([&](const auto& r) { writer->push(io::encode(r)); }, in);
            writer->wait_for_room();
        }
        s.apply(in, g->consumer);
        if (!s.report().ok()) {  // stop at the first violation; clear faults so the run can wind down
            io::trace_clear c{s.now_ns(), std::nullopt, std::nullopt};
            if (writer) writer->push(io::encode(c));
            s.apply(c);
            break;
        }
    }
    s.finish();
    if (writer) writer->push(io::encode(io::trace_end{s.now_ns(), s.report().messages, writer->dropped()}));
    return s.report();
}

void print_report(const sim_report& r, std::ostream& out) {
    out << "soak: submitted=" << r.submitted << " rejected=" << r.rejected << " cancels=" << r.cancels
        << " slow_consumers=" << r.slow_consumers << " slow_cancels=" << r.slow_cancels
        << " fault_arms=" << r.arms << " faults_fired=" << r.faults_fired << " device_resets=" << r.device_resets
        << " preemptions=" << r.preemptions << " cache_hit_tokens=" << r.cache_hit_tokens
        << " verify_rows=" << r.verify_rows << " drafted=" << r.drafted_tokens << " accepted=" << r.accepted_tokens
        << " dead_episodes=" << r.dead_episodes << " generation_ops=" << r.generation_ops
        << " operator_resets=" << r.operator_resets << "\n  finished: stop=" << r.finished[0] << " length=" << r.finished[1] << " cancelled=" << r.finished[2]
        << " timeout=" << r.finished[3] << " error=" << r.finished[4] << " greedy_checked=" << r.greedy_checked
        << " messages=" << r.messages << " virtual_s=" << double(r.end_ns) / 1e9 << "\n";
    for (const auto& v : r.violations) out << "  VIOLATION " << v << "\n";
}

result<std::uint64_t> traced_pass(const soak_options& o, const plan& p, const std::string& path, sim_report& report) {
    auto w = io::trace_writer::open(path);
    if (!w) return w.error();
    auto r = soak_pass(o, p, w->get());
    auto closed = (*w)->close();
    if (!r) return r.error();
    if (!closed) return closed.error();
    report = *r;
    return (*w)->dropped();
}

}  // namespace

result<std::int64_t> parse_duration_ns(const std::string& text) {
    static const std::pair<const char*, double> units[] = {{"ms", 1e6}, {"s", 1e9}, {"m", 60e9}, {"h", 3600e9}, {"d", 86400e9}};
    try {
        std::size_t used = 0;
        double v = std::stod(text, &used);
        std::string_view unit = std::string_view(text).substr(used);
        if (unit.empty()) unit = "s";
        for (const auto& [name, scale] : units)
            if (unit == name && v > 0) return std::int64_t(v * scale);
    } catch (const std::exception&) {
    }
    return make_error(status::invalid_argument, "bad duration \"" + text + "\" (use e.g. 90s, 15m, 1h, 24h)");
}

result<soak_outcome> run_soak(const soak_options& o, std::ostream& out) {
    std::mt19937_64 rng(o.seed);
    plan p = make_plan(rng);
    add_reuse_plan(p, o.seed);
    add_speculative_plan(p, o.seed, !o.package_dir.empty());
    print_plan(p, o, out);
    soak_outcome outcome;
    if (!o.trace_path.empty()) {
        auto dropped = traced_pass(o, p, o.trace_path, outcome.report);
        if (!dropped) return dropped.error();
        outcome.trace_written = o.trace_path;
        outcome.trace_dropped = *dropped;
    } else {
        auto r = soak_pass(o, p, nullptr);
        if (!r) return r.error();
        outcome.report = *r;
        if (!outcome.report.ok()) {  // same seed, same run: repeat it with the trace on
            std::string path = o.failure_trace_path.empty() ? "calserve-soak-" + std::to_string(o.seed) + ".trace.jsonl"
                                                            : o.failure_trace_path;
            sim_report again;
            if (auto dropped = traced_pass(o, p, path, again); dropped) {
                outcome.trace_written = path;
                outcome.trace_dropped = *dropped;
            }
        }
    }
    print_report(outcome.report, out);
    if (!outcome.trace_written.empty())
        out << "trace: " << outcome.trace_written << " (dropped " << outcome.trace_dropped << " records)\n";
    return outcome;
}

}  // namespace calserve::soak
