// Runner, stress mode (see runner.hpp): random sequences kept two jobs in flight
// (ping and pong) for a duration, then drained; KV must be back to zero and a
// sample of finished sequences must replay identically on the reference model.
#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <random>

#include "device/runner/host_session.hpp"
#include "device/runner/runner.hpp"

namespace calserve::device::runner {

namespace json = boost::json;
using clock_type = std::chrono::steady_clock;

namespace {
struct sequence {
    seq_id id = 0;
    std::vector<model::token_id> prompt;
    std::vector<model::token_id> generated;
    int target = 0;
    bool prefilled = false;
    bool in_flight = false;
};

struct in_flight_job {
    job_id job;
    slot s;
    submodel_kind kind;
    seq_id seq;
    clock_type::time_point submitted;
};

struct stress_state {
    device& dev;
    host_session session;
    const runner_options& o;
    std::mt19937_64 rng;
    std::map<seq_id, sequence> live;
    std::deque<in_flight_job> flight;
    std::vector<sequence> finished;
    seq_id next_id = 1000;
    std::int64_t jobs = 0, tokens = 0, kv_waits = 0;
    std::map<std::string, std::int64_t> errors;
    std::vector<double> latencies_ms;
};

int pick(stress_state& st, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(st.rng); }

void note_error(stress_state& st, const error_info& e) { ++st.errors[std::string(to_string(e.code))]; }

// Starts a new sequence when there is room; returns nullptr otherwise.
sequence* admit(stress_state& st) {
    if (static_cast<int>(st.live.size()) >= st.o.sequences) return nullptr;
    const auto context = st.dev.package().context;
    const int prompt_len = pick(st, 1, static_cast<int>(std::min<std::int64_t>(st.o.max_prompt, context / 2)));
    const int target = pick(st, 1, static_cast<int>(std::min<std::int64_t>(st.o.max_decode, context - prompt_len - 1)));
    if (!st.dev.kv_can_allocate(prompt_len + target)) {
        ++st.kv_waits;  // capacity pushes back: try again when a sequence finishes
        return nullptr;
    }
    sequence s;
    s.id = st.next_id++;
    s.prompt = make_prompt(static_cast<std::size_t>(prompt_len), st.rng(), st.dev.package().vocab_size);
    s.target = target;
    if (auto r = st.dev.kv_allocate(s.id, prompt_len + target); !r) {
        note_error(st, r.error());
        return nullptr;
    }
    return &st.live.emplace(s.id, std::move(s)).first->second;
}

sequence* runnable(stress_state& st) {
    std::vector<sequence*> ready;
    for (auto& [id, s] : st.live)
        if (!s.in_flight) ready.push_back(&s);
    if (!ready.empty() && (pick(st, 0, 3) > 0 || static_cast<int>(st.live.size()) >= st.o.sequences))
        return ready[static_cast<std::size_t>(pick(st, 0, static_cast<int>(ready.size()) - 1))];
    if (auto* s = admit(st)) return s;
    return ready.empty() ? nullptr : ready.front();
}

bool submit_one(stress_state& st, slot s) {
    sequence* q = runnable(st);
    if (!q) return false;
    const submodel_kind kind = q->prefilled ? submodel_kind::decode : submodel_kind::prefill;
    std::vector<model::token_id> input = q->prefilled ? std::vector<model::token_id>{q->generated.back()} : q->prompt;
    auto j = st.session.submit(kind, s, q->id, input);
    if (!j) {
        note_error(st, j.error());
        return false;
    }
    q->in_flight = true;
    st.flight.push_back({*j, s, kind, q->id, clock_type::now()});
    ++st.jobs;
    st.tokens += static_cast<std::int64_t>(input.size());
    return true;
}

void collect_one(stress_state& st) {
    const in_flight_job f = st.flight.front();
    st.flight.pop_front();
    auto out = st.session.collect(f.job, f.kind, f.s);
    st.latencies_ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - f.submitted).count());
    auto& q = st.live.at(f.seq);
    q.in_flight = false;
    if (!out) {
        note_error(st, out.error());
        if (st.dev.status().state != device_state::ready) (void)recover(st.dev);
        (void)st.dev.kv_free(f.seq);
        st.live.erase(f.seq);
        return;
    }
    q.prefilled = true;
    q.generated.push_back(argmax(out->logits));
    if (static_cast<int>(q.generated.size()) > q.target) {
        if (auto r = st.dev.kv_free(q.id); !r) note_error(st, r.error());
        st.finished.push_back(std::move(q));
        st.live.erase(f.seq);
    }
}

// Replays a finished sequence on the reference, teacher-forced with the device's tokens.
int replay_mismatches(model::causal_lm& ref, const sequence& s) {
    constexpr model::seq_id k_ref = 777777;
    std::vector<float> logits(static_cast<std::size_t>(ref.shape().vocab_size));
    int mismatches = 0;
    if (!ref.prefill(k_ref, s.prompt, logits)) return -1;
    for (std::size_t i = 0; i < s.generated.size(); ++i) {
        round_to_bf16(logits);
        mismatches += argmax(logits) != s.generated[i] ? 1 : 0;
        if (i + 1 < s.generated.size() && !ref.decode(k_ref, s.generated[i], logits)) return -1;
    }
    ref.free_sequence(k_ref);
    return mismatches;
}

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}
}  // namespace

runner_report run_stress(device& dev, model::causal_lm& reference, const runner_options& o) {
    stress_state st{dev, host_session(dev, o.wait_limit), o, std::mt19937_64(o.seed), {}, {}, {}, 1000, 0, 0, 0, {}, {}};
    const auto t0 = clock_type::now();
    const auto stop = t0 + o.duration;
    slot next = slot::ping;
    while (clock_type::now() < stop || !st.flight.empty()) {
        const bool admitting = clock_type::now() < stop;
        while (admitting && st.flight.size() < k_slot_count && submit_one(st, next))
            next = next == slot::ping ? slot::pong : slot::ping;
        if (st.flight.empty()) break;  // nothing runnable even on an idle device: stop, do not spin
        next = st.flight.front().s;  // the slot freed by the next collect
        collect_one(st);
    }
    for (auto& [id, s] : st.live) (void)dev.kv_free(id);  // unfinished at the deadline
    const double wall_s = std::chrono::duration<double>(clock_type::now() - t0).count();
    json::array verified;
    bool replay_ok = true;
    for (std::size_t i = 0; i < st.finished.size() && static_cast<int>(i) < o.verify_sequences; ++i) {
        const int m = replay_mismatches(reference, st.finished[i]);
        replay_ok = replay_ok && m == 0;
        verified.push_back(json::object{{"sequence", st.finished[i].id},
                                        {"prompt", st.finished[i].prompt.size()},
                                        {"generated", st.finished[i].generated.size()},
                                        {"greedy_mismatches", m}});
    }
    json::object errors;
    std::int64_t error_count = 0;
    for (const auto& [name, n] : st.errors) {
        errors[name] = n;
        error_count += n;
    }
    runner_report report;
    const auto kv_end = dev.kv().blocks_used;
    report.pass = error_count == 0 && kv_end == 0 && replay_ok && !st.finished.empty();
    report.json = {{"mode", "stress"},
                   {"package", dev.package().name},
                   {"seed", o.seed},
                   {"duration_s", wall_s},
                   {"jobs", st.jobs},
                   {"tokens", st.tokens},
                   {"sequences_finished", st.finished.size()},
                   {"jobs_per_s", wall_s > 0 ? static_cast<double>(st.jobs) / wall_s : 0.0},
                   {"job_latency_ms_p50", percentile(st.latencies_ms, 0.50)},
                   {"job_latency_ms_p99", percentile(st.latencies_ms, 0.99)},
                   {"kv_pushbacks", st.kv_waits},
                   {"errors", std::move(errors)},
                   {"kv_blocks_used_at_end", kv_end},
                   {"replayed", std::move(verified)},
                   {"verdict", report.pass ? "pass" : "fail"}};
    return report;
}

}  // namespace calserve::device::runner
