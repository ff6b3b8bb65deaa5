#include "actors/batch_tick_actor.hpp"

#include <algorithm>
#include <spdlog/spdlog.h>

#include "actors/chip_session_actor.hpp"
#include "actors/kv_manager_actor.hpp"
#include "metrics/metrics.hpp"
#include "actors/request_actor.hpp"
#include "config/invariant.hpp"
#include "model/sampling/params.hpp"

namespace calserve::actors {

namespace {
// A preempted sequence waits for KV as long as its request lives (its own deadline ends it).
constexpr std::chrono::nanoseconds k_preempted_kv_wait = std::chrono::hours(24);

rq_failed device_dead_failure() { return rq_failed{make_error(status::device_dead, "device is dead"), "none (device dead)"}; }

// What preemption needs to know of a sequence in `phase`.
victim_view victim_of(sequence_id seq, std::uint64_t admitted, seq_phase phase) {
    return {seq, admitted, holds_kv(phase), holds_job(phase),
            phase == seq_phase::growing || phase == seq_phase::finishing_grow, ending(phase)};
}
}  // namespace

std::string_view to_string(seq_phase p) {
    switch (p) {
        case seq_phase::kv_wait: return "kv_wait";
        case seq_phase::kv_wait_awaiting: return "kv_wait_awaiting";
        case seq_phase::ready: return "ready";
        case seq_phase::growing: return "growing";
        case seq_phase::prefill: return "prefill";
        case seq_phase::decode: return "decode";
        case seq_phase::decode_chained: return "decode_chained";
        case seq_phase::decode_unchained: return "decode_unchained";
        case seq_phase::verify: return "verify";
        case seq_phase::finishing_chained: return "finishing_chained";
        case seq_phase::awaiting: return "awaiting";
        case seq_phase::finishing_job: return "finishing_job";
        case seq_phase::finishing_grow: return "finishing_grow";
        case seq_phase::released: return "released";
    }
    return "?";
}

std::string_view to_string(device_copy c) {
    switch (c) {
        case device_copy::none: return "none";
        case device_copy::copied: return "copied";
        case device_copy::held: return "held";
        case device_copy::shared: return "shared";
        case device_copy::lost: return "lost";
        case device_copy::recopied: return "recopied";
    }
    return "?";
}

batch_tick_actor::entry::entry(sequence_ptr s, address<request_actor> r, std::uint64_t order)
    : seq(std::move(s)),
      request(std::move(r)),
      admitted(order),
      life(k_seq_table, seq_phase::kv_wait, "seq:" + std::to_string(seq->seq)),
      device(k_copy_table, device_copy::none, "seq:" + std::to_string(seq->seq) + ":device_copy") {}

batch_tick_actor::batch_tick_actor(runtime& rt, batch_tick_options options, metrics::calserve_metrics* metrics)
    : actor(rt, "batch_tick"), options_(options), metrics_(metrics) {
    options_.policy.slots = std::clamp(options_.max_inflight, 1, int(device::k_slot_count));
    options_.policy.max_batch = std::max(1, options_.policy.max_batch);
    if (options_.max_inflight < 2) slot_free_[device::index_of(device::slot::pong)] = false;
}

void batch_tick_actor::wire(address<chip_session_actor> session, address<kv_manager_actor> kv) {
    session_ = std::move(session);
    kv_ = std::move(kv);
}

void batch_tick_actor::on_message(batch_tick_message& msg) {
    std::visit([this](auto& m) { on(m); }, msg);
    check_liveness();
    if (metrics_) {
        std::int64_t running = 0;
        for (const auto& [id, e] : entries_) running += holds_kv(e.phase()) ? 1 : 0;
        metrics_->requests_running.set(double(running));
        metrics_->requests_waiting.set(double(pending_.size() + entries_.size() - std::size_t(running)));
    }
}

// The engine admitted the request at its door (device, draining, context, the in-flight
// bound, which also bounds the queue here); here only `max_running` and the order of
// arrival decide (KV waits are the KvManager's).
start_input batch_tick_actor::admission_now(std::int64_t ahead) const {
    return {std::int64_t(entries_.size()), ahead, options_.max_running, dead_};
}

void batch_tick_actor::on(bt_admit& m) {
    const auto d = plan_start(admission_now(std::int64_t(pending_.size())));
    if (d.verdict == admission::reject) {
        (void)m.request.tell(device_dead_failure(), id());  // the only refusal here (reason device_dead)
    } else if (d.verdict == admission::queue) {
        pending_.push_back(std::move(m));
    } else {
        admit(std::move(m));
    }
}

void batch_tick_actor::admit(bt_admit m) {
    const sequence_id sid = m.seq->seq;
    auto [it, fresh] = entries_.try_emplace(sid, std::move(m.seq), std::move(m.request), ++admitted_);
    CALSERVE_INVARIANT(fresh, "sequence admitted twice");
    // Only rows the device's head draws may draft (docs/speculative.md "Which requests draft").
    const auto& s = *it->second.seq;
    if (options_.speculative.enabled() && !s.constraint && model::head_can_sample(s.params)) {
        it->second.drafter = model::speculative::make_drafter(options_.speculative.drafter);
        it->second.acceptance = model::speculative::initial_acceptance(options_.speculative.policy);
    }
    request_kv(it->second, false);
}

void batch_tick_actor::request_kv(entry& e, bool front) {
    auto& seq = *e.seq;
    const std::int64_t want = kv_reserve_tokens(options_.kv, std::int64_t(seq.tokens.size()), seq.full_tokens);
    auto self = address<batch_tick_actor>(shared_from_this());
    auto me = id();
    auto deadline = rt().now() + (front ? k_preempted_kv_wait : options_.kv_wait);
    kv_reserve reserve{seq.seq, want, deadline,
                       [self, me](kv_grant g) {
                           (void)self.tell(bt_kv_granted{g.seq, g.outcome, g.cached_tokens}, me);
                       },
                       seq.full_tokens, front, nullptr, cache_key{}};
    if (options_.prefix_cache && !seq.scoring()) {  // a scored prompt needs every position's logits
        // What its next prefill feeds from position 0: looked up when the grant is made.
        reserve.prefix = std::make_shared<const std::vector<token_id>>(seq.tokens);
        reserve.scope = seq.scope;
        e.looked_up = reserve.prefix;
    }
    (void)kv_.tell(std::move(reserve), id());
    seq.kv_tokens = want;
}

void batch_tick_actor::on(bt_kv_granted& m) {
    auto it = entries_.find(m.seq);
    if (it == entries_.end()) {
        // Finished (cancelled) while waiting: give the grant back.
        if (m.outcome.ok()) (void)kv_.tell(kv_release{m.seq, false}, id());
        return;
    }
    entry& e = it->second;
    if (!m.outcome.ok()) {
        (void)e.request.tell(rq_failed{m.outcome.error(), "kv_reserve"}, id());
        e.life.transition_to(seq_phase::released);
        entries_.erase(it);  // nothing held: the Request's bt_finish will find no entry
        admit_pending();
        return;
    }
    // Only the kv_wait phases have a kv_reserve out; any other phase is reported, not applied.
    if (!e.life.transition_to(e.phase() == seq_phase::kv_wait_awaiting ? seq_phase::awaiting : seq_phase::ready)) return;
    if (m.cached_tokens > 0) {  // a hit: the KV of its first tokens is being copied in
        e.seq->cached_tokens = m.cached_tokens;
        e.device.transition_to(e.copy() == device_copy::lost ? device_copy::recopied : device_copy::copied);
    }
    schedule();
}

void batch_tick_actor::grow_kv(entry& e, sequence_id preempt) {
    const std::int64_t want = kv_grow_tokens(options_.kv, std::int64_t(e.seq->tokens.size()), e.seq->full_tokens);
    auto self = address<batch_tick_actor>(shared_from_this());
    auto me = id();
    e.life.transition_to(seq_phase::growing);
    (void)kv_.tell(kv_grow{e.seq->seq, want, preempt,
                           [self, me, want](kv_grant g) { (void)self.tell(bt_kv_grown{g.seq, want, g.outcome}, me); }},
                   id());
}

void batch_tick_actor::on(bt_kv_grown& m) {
    auto it = entries_.find(m.seq);
    if (it == entries_.end()) return;
    entry& e = it->second;
    if (e.phase() == seq_phase::finishing_grow) {
        release(m.seq);
        return;
    }
    if (!e.life.transition_to(seq_phase::ready)) return;  // no grow was out: reported
    if (m.outcome.ok()) {
        e.seq->kv_tokens = m.tokens;
    } else if (m.outcome.code() == status::kv_full) {
        preempt(e);
    }
    schedule();
}

// No free block for `grower` (ready again, its grow refused): `plan_victim` picks whose KV goes.
void batch_tick_actor::preempt(entry& grower) {
    std::vector<victim_view> seqs;
    seqs.reserve(entries_.size());
    for (const auto& [sid, e] : entries_) seqs.push_back(victim_of(sid, e.admitted, e.phase()));
    auto victim_id = plan_victim(seqs);
    if (!victim_id) return;  // cannot happen: the grower itself is a candidate
    entry& v = entries_.at(*victim_id);
    ++preemptions_;
    if (metrics_) metrics_->preemptions_total.inc();
    v.life.transition_to(v.phase() == seq_phase::awaiting ? seq_phase::kv_wait_awaiting : seq_phase::kv_wait);
    drop_copy(v);  // the KvManager frees its device KV and drops its running entry with its blocks
    v.group = k_no_group;
    if (&v == &grower) {
        (void)kv_.tell(kv_release{v.seq->seq, true}, id());
    } else {
        grow_kv(grower, v.seq->seq);  // the victim's blocks (and device KV) go first, to the grower
    }
    request_kv(v, true);
}

// Its Request's answer is no longer waited for (it came, the token went on, or no token
// came); false when it was not awaiting one.
bool batch_tick_actor::stop_awaiting(entry& e) {
    if (e.phase() == seq_phase::awaiting) return e.life.transition_to(seq_phase::ready);
    if (e.phase() == seq_phase::kv_wait_awaiting) return e.life.transition_to(seq_phase::kv_wait);
    return false;
}

// The sequence's jobs keep failing (a poison request, or one the device cannot run):
// it fails alone and its KV goes back; the Request's bt_finish then finds no entry.
void batch_tick_actor::give_up(sequence_id seq, entry& e) {
    if (metrics_) metrics_->request_retries_exhausted.inc();
    (void)e.request.tell(rq_failed{make_error(status::job_retries_exhausted,
                                              std::to_string(e.seq->failed_jobs) + " device jobs in a row failed"),
                                   "its device jobs, lost to faults (runtime.max_job_retries " +
                                       std::to_string(options_.max_job_retries) + ")"},
                         id());
    release(seq);
}

void batch_tick_actor::on(bt_continue& m) {
    if (auto it = entries_.find(m.seq); it != entries_.end()) {
        it->second.last_served = rt().now();
        // The answer for a token it already went on past must not release a later one,
        // and changes nothing the schedule reads.
        if (it->second.answers_to_skip > 0) {
            --it->second.answers_to_skip;
            return;
        }
        stop_awaiting(it->second);
    }
    schedule();
}

void batch_tick_actor::on(bt_finish& m) {
    auto pending = std::find_if(pending_.begin(), pending_.end(), [&](const bt_admit& a) { return a.seq->seq == m.seq; });
    if (pending != pending_.end()) {
        pending_.erase(pending);
        return;
    }
    auto it = entries_.find(m.seq);
    if (it == entries_.end()) return;
    entry& e = it->second;
    switch (e.phase()) {
        case seq_phase::prefill:
        case seq_phase::decode:
        case seq_phase::decode_unchained:
        case seq_phase::verify: e.life.transition_to(seq_phase::finishing_job); break;
        case seq_phase::decode_chained: e.life.transition_to(seq_phase::finishing_chained); break;
        case seq_phase::growing: e.life.transition_to(seq_phase::finishing_grow); break;
        case seq_phase::finishing_job:
        case seq_phase::finishing_chained:
        case seq_phase::finishing_grow: break;  // already ending
        default: release(m.seq); break;         // nothing holds it
    }
    schedule();
}

void batch_tick_actor::on(bt_device_down& m) {
    awaiting_device_up_ = false;
    device_up_ = false;
    device_generation_ = m.generation;
    for (auto& [id, e] : entries_) drop_copy(e);  // what was copied in is lost too
    // The device lost every cached sequence; copies and keeps from now on carry the new generation.
    if (options_.prefix_cache) (void)kv_.tell(kv_drop_cache{false, m.generation}, id());
}

void batch_tick_actor::on(bt_device_up& m) {
    awaiting_device_up_ = false;
    dead_ = false;  // an operator's reset brought a dead device back
    device_up_ = true;
    device_generation_ = m.generation;
    schedule();
}

void batch_tick_actor::on(bt_device_dead&) {
    dead_ = true;
    device_up_ = false;
    for (auto& [id, e] : entries_) (void)e.request.tell(device_dead_failure(), this->id());
    for (auto& p : pending_) (void)p.request.tell(device_dead_failure(), id());
    pending_.clear();
}

// Its KV goes back to the KvManager, which frees it on the device, or keeps it as a
// prefix cache entry when the device's copy is valid.
void batch_tick_actor::release(sequence_id seq) {
    auto it = entries_.find(seq);
    if (it == entries_.end()) return;
    entry& e = it->second;
    // finishing_job reaches here only once its job ended (job_ended).
    CALSERVE_INVARIANT(!holds_job(e.phase()) || e.phase() == seq_phase::finishing_job,
                       "KV released while a job holds the sequence");
    const bool granted = holds_kv(e.phase());
    const auto& s = *e.seq;
    kv_release out{seq, granted};
    if (options_.prefix_cache) {  // only valid KV may be kept
        out.scope = s.scope;
        if (granted && device_holds(e.copy()) && s.device_len > 0)
            out.cache = std::make_shared<const std::vector<token_id>>(s.tokens.begin(), s.tokens.begin() + s.device_len);
    }
    e.life.transition_to(seq_phase::released);
    entries_.erase(it);
    tick_.left_at = rt().now();  // opens the admission window (schedule_policy: admit_window_until)
    // Not granted: the KvManager drops the waiter, or the grant comes back and is returned.
    (void)kv_.tell(std::move(out), id());
    admit_pending();
}

void batch_tick_actor::admit_pending() {
    while (!pending_.empty()) {
        const auto d = plan_start(admission_now(0));  // the head has nobody ahead of it
        if (d.verdict == admission::queue) return;
        bt_admit next = std::move(pending_.front());
        pending_.pop_front();
        if (d.verdict == admission::reject)
            (void)next.request.tell(device_dead_failure(), id());
        else
            admit(std::move(next));
    }
}

}  // namespace calserve::actors
