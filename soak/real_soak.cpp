// The real-daemon soak: plan, workers, fault arming, sampling, settle (see real_soak.hpp).
#include "soak/real_soak.hpp"
#include "config/json_text.hpp"

#include <atomic>
#include <boost/json.hpp>
#include <condition_variable>
#include <csignal>
#include <fstream>
#include <mutex>
#include <optional>
#include <ostream>
#include <random>
#include <thread>

#include "loadgen/run.hpp"
#include "net/control_socket.hpp"
#include "soak/real_soak_client.hpp"

namespace calserve::soak {
namespace json = boost::json;
using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// Everything the seed decides about the traffic, printed at the start.
struct real_plan {
    std::int64_t max_prompt = 0, max_new = 0;
    double greedy_share = 0, stream_share = 0, deadline_share = 0, disconnect_share = 0, slow_share = 0;
    std::int64_t deadline_min_ms = 0, deadline_max_ms = 0, slow_pause_max_ms = 0;
    double mean_fault_gap_s = 0, clear_every_s = 0;
    double mean_hostile_gap_s = 0;           // between hostile actions (flood, never-read, SIGHUP)
    std::int64_t flood_max = 0, hold_max_ms = 0;
    // Long prompts (chunked prefill), each starting at one of a few corpus offsets so
    // that they share prefixes the way re-sent conversations do (prefix cache hits).
    double long_share = 0;
    std::int64_t long_prompt = 0;
};

constexpr std::size_t k_long_starts = 4;

// Recoverable device faults (as in the virtual soak): each ends in a reset and a
// re-prefill; reset_fail and configure_fail could kill the device and are left out.
const char* const k_fault_points[] = {"wait_timeout", "ccu_exception", "device_lost", "logits_nan", "d2h_error",
                                      "submit_busy", "kv_alloc_fail", "h2d_error", "slow_infer", "submit_error"};

real_plan make_plan(std::uint64_t seed) {
    std::mt19937_64 rng(seed * 0xA24BAED4963EE407ull + 7);
    auto pick = [&](std::initializer_list<std::int64_t> xs) { return *(xs.begin() + rng() % xs.size()); };
    auto unit = [&] { return std::uniform_real_distribution<double>(0, 1)(rng); };
    real_plan p;
    p.max_prompt = pick({16, 64, 200});
    p.max_new = pick({8, 24, 64});
    p.greedy_share = 0.3 + 0.5 * unit();
    p.stream_share = 0.4 + 0.5 * unit();
    p.deadline_share = 0.05 + 0.15 * unit();
    p.deadline_min_ms = pick({5, 50});
    p.deadline_max_ms = p.deadline_min_ms + pick({200, 1000, 3000});
    p.disconnect_share = 0.05 + 0.15 * unit();
    p.slow_share = 0.05 + 0.15 * unit();
    p.slow_pause_max_ms = pick({5, 20, 60});
    p.mean_fault_gap_s = 0.5 + 3.5 * unit();
    p.clear_every_s = 5 + 15 * unit();
    // Drawn last, so the plans of earlier versions keep their other values per seed.
    p.mean_hostile_gap_s = 0.3 + 1.2 * unit();
    p.flood_max = pick({8, 16, 32});
    p.hold_max_ms = pick({200, 500, 1000});
    p.long_share = 0.02 + 0.08 * unit();
    p.long_prompt = pick({1024, 2048});
    return p;
}

void print_plan(const real_plan& p, const real_soak_options& o, std::ostream& out) {
    out << "soak --real: url=" << o.url << " seed=" << o.seed << " duration_s=" << double(o.duration_ms) / 1e3
        << " concurrency=" << o.concurrency << " sample_interval_ms=" << o.sample_interval_ms
        << " warmup=" << o.warmup_share * 100 << "% faults=" << (o.control_socket.empty() ? "off" : o.control_socket)
        << "\n  max_prompt=" << p.max_prompt << " max_new=" << p.max_new << " greedy_share=" << p.greedy_share
        << " stream_share=" << p.stream_share << " deadline_share=" << p.deadline_share << " deadline_ms=["
        << p.deadline_min_ms << "," << p.deadline_max_ms << "] disconnect_share=" << p.disconnect_share
        << " slow_share=" << p.slow_share << " slow_pause_max_ms=" << p.slow_pause_max_ms;
    if (!o.control_socket.empty()) {
        out << " mean_fault_gap_s=" << p.mean_fault_gap_s << " clear_every_s=" << p.clear_every_s;
    }
    out << "\n  hostile: mean_gap_s=" << p.mean_hostile_gap_s << " flood_max=" << p.flood_max
        << " hold_max_ms=" << p.hold_max_ms << " sighup=" << (o.daemon_pid > 0 ? "on" : "off");
    out << "\n  long prompts: share=" << p.long_share << " up to " << p.long_prompt << " tokens from "
        << k_long_starts << " shared starts";
    out << std::endl;
}

std::int64_t between(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
    return lo + std::int64_t(rng() % std::uint64_t(hi - lo + 1));
}
double unit(std::mt19937_64& rng) { return std::uniform_real_distribution<double>(0, 1)(rng); }

struct target {
    loadgen::endpoint ep;
    std::string model;
    std::int64_t context = 0;
    std::vector<std::int64_t> corpus;
};

soak_request make_request(const real_plan& p, const target& t, std::mt19937_64& rng) {
    soak_request r;
    r.model = t.model;
    r.max_tokens = between(rng, 1, p.max_new);
    const bool long_one = unit(rng) < p.long_share;
    const auto want = long_one ? between(rng, p.max_prompt, p.long_prompt) : between(rng, 1, p.max_prompt);
    const auto len = loadgen::cap_prompt(want, r.max_tokens, t.context);
    const auto at = long_one ? (rng() % k_long_starts) * (t.corpus.size() / k_long_starts) : rng() % t.corpus.size();
    for (std::int64_t i = 0; i < len; ++i) r.prompt.push_back(t.corpus[(at + std::size_t(i)) % t.corpus.size()]);
    r.stream = unit(rng) < p.stream_share;
    if (unit(rng) >= p.greedy_share) {
        r.temperature = 0.3 + 1.2 * unit(rng);
        r.top_p = 0.5 + 0.5 * unit(rng);
        r.seed = rng() >> 1;
    }
    if (unit(rng) < p.deadline_share) r.timeout_ms = between(rng, p.deadline_min_ms, p.deadline_max_ms);
    if (r.stream && unit(rng) < p.disconnect_share) r.disconnect_after = between(rng, 0, r.max_tokens - 1);
    if (r.stream && unit(rng) < p.slow_share) r.read_pause_ms = between(rng, 1, p.slow_pause_max_ms);
    return r;
}

// State shared by the workers, the fault thread and the sampler.
struct shared_run {
    shared_run(const real_soak_options& o, const real_plan& p, const target& t) : opt(o), plan(p), tgt(t) {}
    const real_soak_options& opt;
    const real_plan& plan;
    const target& tgt;
    clock_type::time_point start, load_end;
    std::atomic<bool> stop_load{false};
    std::atomic<std::uint64_t> sent{0}, done{0};
    std::mutex mutex;  // guards report and cv
    std::condition_variable cv;
    bool stop_sampling = false;
    real_soak_report report;

    double now_s() const { return std::chrono::duration<double>(clock_type::now() - start).count(); }
    bool load_over() const { return stop_load.load() || clock_type::now() >= load_end; }
    // Sleeps up to `d`, returning early when the load ends.
    void nap(milliseconds d) {
        std::unique_lock lock(mutex);
        cv.wait_for(lock, d, [&] { return stop_load.load(); });
    }
};

void worker(shared_run& run, int index) {
    std::mt19937_64 rng(run.opt.seed * 0x9E3779B97F4A7C15ull + std::uint64_t(index) + 1);
    while (!run.load_over()) {
        auto req = make_request(run.plan, run.tgt, rng);
        run.sent.fetch_add(1);
        auto end = perform_request(run.tgt.ep, req, milliseconds(run.opt.io_timeout_ms));
        end.seen.faults_armed = !run.opt.control_socket.empty();
        const auto outcome = classify(end.seen);
        {
            std::lock_guard lock(run.mutex);
            ++run.report.outcomes[static_cast<std::size_t>(outcome)];
            if (outcome != request_outcome::completed && outcome != request_outcome::disconnected) {
                ++run.report.errors[error_key(end)];
            }
            if (outcome == request_outcome::unexpected) ++run.report.unexpected[error_key(end)];
            const bool named = outcome == request_outcome::unexpected || outcome == request_outcome::retries_exhausted;
            if (named && run.report.request_ids.size() < real_soak_report::k_ids_kept)
                run.report.request_ids.emplace_back(
                    outcome, (end.request_id.empty() ? "(no id)" : end.request_id) + " " + error_key(end));
        }
        run.done.fetch_add(1);
        if (end.seen.http_status == 0) run.nap(milliseconds(100));  // daemon gone: do not spin
    }
}

// One control-socket command; its `result` object when the daemon said ok.
std::optional<json::object> control(shared_run& run, const json::object& cmd) {
    auto reply = net::control_call(run.opt.control_socket, json_text(cmd), 5000);
    if (!reply) return std::nullopt;
    boost::system::error_code ec;
    auto v = json::parse(*reply, ec);
    if (ec || !v.is_object() || !v.get_object().contains("ok") || v.at("ok") != true) return std::nullopt;
    const auto* r = v.get_object().if_contains("result");
    return r != nullptr && r->is_object() ? r->get_object() : json::object{};
}

// A new fault is armed only when the last one has fired and the device serves
// again: a fault firing into the warm-up after a reset counts as a failed reset,
// and device.reset_limit of them in a row kill the device (correct, but the end
// of a soak's usefulness).
bool ready_for_fault(shared_run& run) {
    auto listed = control(run, json::object{{"cmd", "fault.list"}});
    if (!listed) return false;
    if (const auto* faults = listed->if_contains("faults"); faults != nullptr && faults->is_array()) {
        for (const auto& f : faults->get_array()) {
            const auto* left = f.is_object() ? f.get_object().if_contains("remaining") : nullptr;
            if (left != nullptr && left->is_int64() && left->get_int64() != 0) return false;
        }
    }
    return fetch_text(run.tgt.ep, "/ready", milliseconds(5000)).ok();
}

void fault_injector(shared_run& run) {
    std::mt19937_64 rng(run.opt.seed * 0xD6E8FEB86659FD93ull + 3);
    auto next_clear = clock_type::now() + milliseconds(std::int64_t(run.plan.clear_every_s * 1000));
    auto clear = [&] {
        if (control(run, json::object{{"cmd", "fault.clear"}})) {
            std::lock_guard lock(run.mutex);
            ++run.report.clears;
        }
    };
    while (!run.load_over()) {
        const double gap_s = std::exponential_distribution<double>(1.0 / run.plan.mean_fault_gap_s)(rng);
        run.nap(milliseconds(std::int64_t(gap_s * 1000) + 1));
        if (run.load_over()) break;
        json::object arm{{"cmd", "fault.arm"}, {"point", k_fault_points[rng() % std::size(k_fault_points)]},
                         {"mode", "once"}};
        if (arm.at("point") == "slow_infer") arm["delay_ms"] = between(rng, 1, 200);
        if (clock_type::now() >= next_clear) {
            next_clear = clock_type::now() + milliseconds(std::int64_t(run.plan.clear_every_s * 1000));
            clear();
        }
        if (!ready_for_fault(run)) {
            std::lock_guard lock(run.mutex);
            ++run.report.arms_deferred;
            continue;
        }
        const bool ok = control(run, arm).has_value();
        std::lock_guard lock(run.mutex);
        ++(ok ? run.report.arms : run.report.arms_refused);
    }
    clear();
}

// Hostile clients beside the load: a connection flood, a stream nobody reads, or a
// SIGHUP (with the daemon's pid). During each, /health must answer; a miss is a
// failure of the run (the daemon is meant to shrug all three off).
void hostile_clients(shared_run& run) {
    std::mt19937_64 rng(run.opt.seed * 0x94D049BB133111EBull + 5);
    auto probe = [&] {
        if (fetch_text(run.tgt.ep, "/health", milliseconds(10'000)).ok()) return;
        std::lock_guard lock(run.mutex);
        ++run.report.health_misses;
    };
    // Round robin from a seeded start, so a short run meets every kind.
    const std::uint64_t kinds = run.opt.daemon_pid > 0 ? 3 : 2;
    std::uint64_t next = rng() % kinds;
    while (!run.load_over()) {
        const double gap_s = std::exponential_distribution<double>(1.0 / run.plan.mean_hostile_gap_s)(rng);
        run.nap(milliseconds(std::int64_t(gap_s * 1000) + 1));
        if (run.load_over()) break;
        const auto hold = milliseconds(between(rng, 50, run.plan.hold_max_ms));
        const auto action = next++ % kinds;
        if (action == 0) {
            auto opened = flood_connections(run.tgt.ep, std::size_t(between(rng, 1, run.plan.flood_max)), hold, probe);
            std::lock_guard lock(run.mutex);
            ++run.report.floods;
            run.report.flood_connections += opened;
        } else if (action == 1) {
            auto req = make_request(run.plan, run.tgt, rng);
            req.stream = true;
            req.max_tokens = run.plan.max_new;
            req.prompt.resize(std::size_t(loadgen::cap_prompt(std::int64_t(req.prompt.size()), req.max_tokens,
                                                                 run.tgt.context)));
            if (req.prompt.empty()) req.prompt.push_back(run.tgt.corpus.front());
            bool sent = never_reading_stream(run.tgt.ep, req, hold, probe);
            std::lock_guard lock(run.mutex);
            run.report.never_read += sent ? 1 : 0;
        } else {
            ::kill(run.opt.daemon_pid, SIGHUP);
            probe();
            std::lock_guard lock(run.mutex);
            ++run.report.hups;
        }
    }
}

std::string sample_json(const sample_point& s) {
    json::object o{{"t_s", s.t_s},
                   {"requests_done", s.requests_done},
                   {"rss_bytes", s.gauges.rss_bytes},
                   {"open_fds", s.gauges.open_fds},
                   {"threads", s.gauges.threads},
                   {"kv_blocks_used", s.gauges.kv_blocks_used},
                   {"inflight_slots", s.gauges.inflight_slots},
                   {"requests_running", s.gauges.requests_running},
                   {"requests_waiting", s.gauges.requests_waiting}};
    if (s.gauges.cpu_seconds == s.gauges.cpu_seconds) o["cpu_seconds"] = s.gauges.cpu_seconds;
    if (s.gauges.heap_bytes == s.gauges.heap_bytes) o["heap_bytes"] = s.gauges.heap_bytes;
    return json_text(o);
}

void print_progress(const shared_run& run, const sample_point& s, std::ostream& out) {
    out << "soak --real: t=" << std::llround(s.t_s) << "s sent=" << run.sent.load() << " done=" << run.done.load()
        << " rss_mib=" << s.gauges.rss_bytes / 1048576.0 << " heap_mib=" << s.gauges.heap_bytes / 1048576.0
        << " fds=" << s.gauges.open_fds
        << " threads=" << s.gauges.threads << " kv_blocks_used=" << s.gauges.kv_blocks_used << std::endl;
}

// Scrapes every interval while the load runs; three failed scrapes in a row stop the load.
void sampler(shared_run& run, std::ofstream* jsonl, std::ostream& out) {
    const milliseconds interval(run.opt.sample_interval_ms);
    const double progress_every_s = std::max(1.0, double(run.opt.duration_ms) / 1e4);
    double next_progress_s = progress_every_s;
    int failures_in_row = 0;
    for (auto next = run.start; ; next += interval) {
        {
            std::unique_lock lock(run.mutex);
            if (run.cv.wait_until(lock, next, [&] { return run.stop_sampling; })) return;
        }
        sample_point s;
        s.requests_done = double(run.done.load());
        auto page = fetch_text(run.tgt.ep, "/metrics", milliseconds(std::min<std::int64_t>(run.opt.io_timeout_ms, 10'000)));
        auto g = page ? parse_gauges(*page) : std::nullopt;
        s.t_s = run.now_s();
        if (!g) {
            if (++failures_in_row >= 3) {
                std::lock_guard lock(run.mutex);
                run.report.daemon_answering = false;
                run.stop_load = true;
                run.cv.notify_all();
            }
            continue;
        }
        failures_in_row = 0;
        s.gauges = *g;
        if (jsonl != nullptr) *jsonl << sample_json(s) << "\n" << std::flush;
        if (s.t_s >= next_progress_s) {
            next_progress_s += progress_every_s;
            print_progress(run, s, out);
        }
        std::lock_guard lock(run.mutex);
        run.report.samples.push_back(s);
    }
}

// After the load: polls until KV and in-flight gauges are all 0, or settle_ms.
void settle(shared_run& run) {
    const auto deadline = clock_type::now() + milliseconds(run.opt.settle_ms);
    const auto began = clock_type::now();
    int failures = 0;
    while (true) {
        auto page = fetch_text(run.tgt.ep, "/metrics", milliseconds(10'000));
        auto g = page ? parse_gauges(*page) : std::nullopt;
        if (g) {
            run.report.final_gauges = *g;
            failures = 0;
            if (g->kv_blocks_used == 0 && g->inflight_slots == 0 && g->requests_running == 0 &&
                g->requests_waiting == 0) {
                run.report.settled = true;
                break;
            }
        } else if (++failures >= 3) {
            run.report.daemon_answering = false;
            break;
        }
        if (clock_type::now() >= deadline) break;
        std::this_thread::sleep_for(milliseconds(200));
    }
    run.report.settle_s = std::chrono::duration<double>(clock_type::now() - began).count();
}

result<target> connect_target(const real_soak_options& o, std::int64_t max_prompt) {
    auto ep = loadgen::parse_url(o.url);
    if (!ep) return ep.error();
    const milliseconds t(10'000);
    auto info = loadgen::fetch_server_info(*ep, t);
    if (!info) return make_error(status::io_error, "daemon at " + o.url + ": " + info.error().message);
    auto page = fetch_text(*ep, "/metrics", t);
    if (!page) return page.error();
    if (!parse_gauges(*page)) {
        return make_error(status::unsupported, "/metrics lacks process_* or calserve KV gauges (docs/metrics.md)");
    }
    auto corpus = loadgen::corpus_tokens(loadgen::remote_encoder(*ep, t), loadgen::default_corpus_text(), max_prompt * 4);
    if (!corpus) return corpus.error();
    if (corpus->empty()) return make_error(status::io_error, "/tokenize returned no tokens");
    return target{*ep, info->model, info->max_model_len, std::move(*corpus)};
}

}  // namespace

result<real_soak_report> run_real_soak(const real_soak_options& o, std::ostream& out) {
    if (o.duration_ms <= 0 || o.concurrency < 1 || o.sample_interval_ms <= 0 || o.warmup_share < 0 ||
        o.warmup_share >= 1) {
        return make_error(status::invalid_argument, "duration, concurrency, sample interval > 0 and warmup in [0, 1)");
    }
    const auto plan = make_plan(o.seed);
    auto tgt = connect_target(o, std::max(plan.max_prompt, plan.long_prompt));
    if (!tgt) return tgt.error();
    std::ofstream jsonl;
    if (!o.out_path.empty()) {
        jsonl.open(o.out_path);
        if (!jsonl) return make_error(status::io_error, "cannot write " + o.out_path);
    }
    print_plan(plan, o, out);

    shared_run run(o, plan, *tgt);
    run.start = clock_type::now();
    run.load_end = run.start + milliseconds(o.duration_ms);
    std::thread sampling([&] { sampler(run, o.out_path.empty() ? nullptr : &jsonl, out); });
    std::thread faults;
    if (!o.control_socket.empty()) faults = std::thread([&] { fault_injector(run); });
    std::thread hostile([&] { hostile_clients(run); });
    std::vector<std::thread> workers;
    for (int i = 0; i < o.concurrency; ++i) workers.emplace_back([&run, i] { worker(run, i); });
    for (auto& w : workers) w.join();
    if (faults.joinable()) faults.join();
    hostile.join();
    {
        std::lock_guard lock(run.mutex);
        run.stop_sampling = true;
        run.cv.notify_all();
    }
    sampling.join();
    if (run.report.daemon_answering) settle(run);

    auto report = std::move(run.report);
    report.sent = run.sent.load();
    const double warmup_s = o.warmup_share * double(o.duration_ms) / 1e3;
    while (report.warmup_samples < report.samples.size() && report.samples[report.warmup_samples].t_s < warmup_s) {
        ++report.warmup_samples;
    }
    const std::size_t w = report.warmup_samples;
    const double rss_at_warmup = w < report.samples.size() ? report.samples[w].gauges.rss_bytes : 0;
    // RSS: a sustained rise of 10% (at least 32 MiB) over the window; threads: 4 more.
    report.rss = summarize(report.samples, w, [](const daemon_gauges& g) { return g.rss_bytes; },
                           std::max(32.0 * 1048576, 0.1 * rss_at_warmup));
    report.heap = summarize(report.samples, w, [](const daemon_gauges& g) { return g.heap_bytes; },
                            std::max(32.0 * 1048576, 0.1 * rss_at_warmup));
    report.fds = summarize(report.samples, w, [](const daemon_gauges& g) { return g.open_fds; }, 2.0 * o.concurrency + 8);
    report.threads = summarize(report.samples, w, [](const daemon_gauges& g) { return g.threads; }, 4);
    std::vector<double> done, fds;
    for (std::size_t i = report.warmup_samples; i < report.samples.size(); ++i) {
        done.push_back(report.samples[i].requests_done);
        fds.push_back(report.samples[i].gauges.open_fds);
    }
    fd_leak_rule rule;
    rule.noise_fds = 2.0 * o.concurrency + 8;  // a socket per request in flight, scrapes, control connections
    report.fd = judge_fds(done, fds, rule);
    return report;
}

}  // namespace calserve::soak
