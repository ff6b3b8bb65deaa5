#include "actors/batch_tick_actor.hpp"

#include <algorithm>
#include <limits>
#include <spdlog/spdlog.h>

#include "actors/chip_session_actor.hpp"
#include "actors/device_actor.hpp"
#include "actors/kv_manager_actor.hpp"
#include "metrics/metrics.hpp"
#include "actors/request_actor.hpp"
#include "config/invariant.hpp"
#include "model/sampling/params.hpp"

namespace calserve::actors {

namespace {
// A preempted sequence waits for KV as long as its request lives (its own deadline ends it).
constexpr std::chrono::nanoseconds k_preempted_kv_wait = std::chrono::hours(24);

rq_failed device_dead_failure() { return rq_failed{make_error(status::device_dead, "device is dead")}; }

// What preemption needs to know of a sequence in `phase`.
victim_view victim_of(sequence_id seq, std::uint64_t admitted, seq_phase phase) {
    return {seq, admitted, holds_kv(phase), holds_job(phase),
            phase == seq_phase::growing || phase == seq_phase::finishing_grow,
            phase == seq_phase::finishing_job || phase == seq_phase::finishing_grow};
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
        case seq_phase::awaiting: return "awaiting";
        case seq_phase::finishing_job: return "finishing_job";
        case seq_phase::finishing_grow: return "finishing_grow";
        case seq_phase::released: return "released";
    }
    return "?";
}

batch_tick_actor::entry::entry(sequence_ptr s, address<request_actor> r, std::uint64_t order)
    : seq(std::move(s)),
      request(std::move(r)),
      admitted(order),
      life(k_seq_table, seq_phase::kv_wait, "seq:" + std::to_string(seq->seq)) {}

batch_tick_actor::batch_tick_actor(runtime& rt, batch_tick_options options, metrics::calserve_metrics* metrics)
    : actor(rt, "batch_tick"), options_(options), metrics_(metrics) {
    options_.policy.slots = std::clamp(options_.max_inflight, 1, int(device::k_slot_count));
    options_.policy.max_batch = std::max(1, options_.policy.max_batch);
    if (options_.max_inflight < 2) slot_free_[device::index_of(device::slot::pong)] = false;
}

void batch_tick_actor::wire(address<chip_session_actor> session, address<kv_manager_actor> kv,
                            address<device_actor> device) {
    session_ = std::move(session);
    kv_ = std::move(kv);
    device_ = std::move(device);
}

void batch_tick_actor::on_message(batch_tick_message& msg) {
    std::visit([this](auto& m) { on(m); }, msg);
    if (metrics_) {
        std::int64_t running = 0;
        for (const auto& [id, e] : entries_) running += holds_kv(e.phase()) ? 1 : 0;
        metrics_->requests_running.set(double(running));
        metrics_->requests_waiting.set(double(pending_.size() + entries_.size() - std::size_t(running)));
    }
}

// The engine admitted the request at its door (device, draining, context, the in-flight
// bound); here only `max_running` and the order of arrival decide (KV waits are the KvManager's).
admission_input batch_tick_actor::admission_now(std::int64_t ahead) const {
    admission_input in;
    in.running = std::int64_t(entries_.size());
    in.queued = ahead;
    in.max_running = options_.max_running;
    in.max_queued = std::numeric_limits<std::int64_t>::max();  // bounded by the engine (max_running + max_queued)
    in.device_dead = dead_;
    return in;
}

void batch_tick_actor::on(bt_admit& m) {
    const auto d = plan_admission(admission_now(std::int64_t(pending_.size())));
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
    if (options_.prefix_cache) {
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
        if (m.outcome.ok()) (void)kv_.tell(kv_release{m.seq}, id());
        return;
    }
    entry& e = it->second;
    if (!m.outcome.ok()) {
        (void)e.request.tell(rq_failed{m.outcome.error()}, id());
        e.life.transition_to(seq_phase::released);
        entries_.erase(it);  // nothing held: the Request's bt_finish will find no entry
        admit_pending();
        return;
    }
    // Only the kv_wait phases have a kv_reserve out; any other phase is reported, not applied.
    if (!e.life.transition_to(e.phase() == seq_phase::kv_wait_awaiting ? seq_phase::awaiting : seq_phase::ready)) return;
    e.cached = m.cached_tokens;  // a hit: the KV of its first tokens is being copied in
    if (e.cached > 0) e.seq->cached_tokens = e.cached;
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
    if (v.copy == device_copy::held) v.copy = device_copy::lost;
    v.shared = false;  // the KvManager drops its running entry with its blocks
    v.group = k_no_group;
    (void)device_.tell(da_kv_free{v.seq->seq}, id());
    if (&v == &grower) {
        (void)kv_.tell(kv_release{v.seq->seq}, id());
    } else {
        grow_kv(grower, v.seq->seq);  // the victim's blocks go to the grower first
    }
    request_kv(v, true);
}

void batch_tick_actor::on(bt_slot_free& m) {
    slot_free_[device::index_of(m.slot)] = true;
    job_ended(m.rows, job_end::completed, m.unrun);
    for (auto seq : m.unrun)
        if (auto it = entries_.find(seq); it != entries_.end()) stop_awaiting(it->second);
    for (auto seq : m.go_on) {
        auto it = entries_.find(seq);
        if (it == entries_.end() || !stop_awaiting(it->second)) continue;
        it->second.last_served = rt().now();
        ++it->second.answers_to_skip;
    }
    schedule();
}

void batch_tick_actor::on(bt_job_lost& m) {
    slot_free_[device::index_of(m.slot)] = true;
    job_ended(m.rows, m.culprit ? job_end::failed : job_end::lost);
}

// A failed job counts against its rows' retry budget; a job lost only because it was in
// flight beside the failed one does not (its rows did nothing wrong).
void batch_tick_actor::job_ended(const std::vector<sequence_id>& rows, job_end how,
                                 const std::vector<sequence_id>& unrun) {
    for (auto seq : rows) {
        auto it = entries_.find(seq);
        if (it == entries_.end()) continue;
        entry& e = it->second;
        const bool ran = std::find(unrun.begin(), unrun.end(), seq) == unrun.end();
        e.jobs = std::max(0, e.jobs - 1);
        if (!ran || how != job_end::completed) --e.tokens_after;  // no draw came of it
        if (e.jobs > 0) {
            // The chained step behind it still holds it: its phase stays. A token it drew
            // goes to the Request, whose answer is not waited for (the next step is under way).
            // Or this was the chained step, back unrun: its source job still holds it.
            if (!ran) e.chain_refused = true;
            if (how != job_end::completed && e.copy == device_copy::held) e.copy = device_copy::lost;
            if (how == job_end::completed && ran) {
                e.seq->failed_jobs = 0;
                ++e.answers_to_skip;
            }
            continue;
        }
        e.chain_refused = false;
        const bool ending = e.phase() == seq_phase::finishing_job;
        if (how == job_end::completed) {
            e.seq->failed_jobs = 0;
            if (!ending) {
                e.life.transition_to(seq_phase::awaiting);
                share_prompt(e);
            }
        } else {
            if (e.copy == device_copy::held) e.copy = device_copy::lost;
            e.shared = false;  // its KV is rebuilt: shared again once it is whole
            if (!ending) e.life.transition_to(seq_phase::ready);
            if (how == job_end::failed && ++e.seq->failed_jobs > options_.max_job_retries && !ending) {
                give_up(seq, e);
                continue;
            }
        }
        if (ending) release(seq);
    }
}

// Once its whole prompt is on the device, the prompt's KV is indexed as a running prefix
// cache entry, so requests arriving while it runs (the other choices of an n > 1
// request, a shared system prompt) copy it instead of prefilling it.
void batch_tick_actor::share_prompt(entry& e) {
    const auto& s = *e.seq;
    if (!options_.prefix_cache || e.shared || e.copy != device_copy::held || s.device_len < s.prompt_len) return;
    e.shared = true;
    auto prompt = e.looked_up && std::int64_t(e.looked_up->size()) == s.prompt_len
                      ? std::move(e.looked_up)
                      : std::make_shared<const std::vector<token_id>>(s.tokens.begin(), s.tokens.begin() + s.prompt_len);
    e.looked_up.reset();
    (void)kv_.tell(kv_share{s.seq, std::move(prompt), s.scope}, id());
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
    spdlog::warn("request {}: {} device jobs in a row failed; failing it alone (runtime.max_job_retries {})",
                 e.seq->request_id, e.seq->failed_jobs, options_.max_job_retries);
    if (metrics_) metrics_->request_retries_exhausted.inc();
    (void)e.request.tell(rq_failed{make_error(status::job_retries_exhausted,
                                              std::to_string(e.seq->failed_jobs) + " device jobs in a row failed")},
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
        case seq_phase::decode: e.life.transition_to(seq_phase::finishing_job); break;
        case seq_phase::growing: e.life.transition_to(seq_phase::finishing_grow); break;
        case seq_phase::finishing_job:
        case seq_phase::finishing_grow: break;  // already ending
        default: release(m.seq); break;         // nothing holds it
    }
    schedule();
}

void batch_tick_actor::on(bt_device_down&) {
    device_up_ = false;
    for (auto& [id, e] : entries_) {
        if (e.copy == device_copy::held) e.copy = device_copy::lost;
        e.cached = 0;  // copied into a device that lost it
        e.shared = false;
    }
    if (options_.prefix_cache) (void)kv_.tell(kv_drop_cache{}, id());  // the device lost every cached sequence
}

void batch_tick_actor::on(bt_device_up&) {
    dead_ = false;  // an operator's reset brought a dead device back
    device_up_ = true;
    schedule();
}

void batch_tick_actor::on(bt_device_dead&) {
    dead_ = true;
    device_up_ = false;
    for (auto& [id, e] : entries_) (void)e.request.tell(device_dead_failure(), this->id());
    for (auto& p : pending_) (void)p.request.tell(device_dead_failure(), id());
    pending_.clear();
}

void batch_tick_actor::release(sequence_id seq) {
    auto it = entries_.find(seq);
    if (it == entries_.end()) return;
    entry& e = it->second;
    // finishing_job reaches here only once its job ended (job_ended).
    CALSERVE_INVARIANT(e.phase() != seq_phase::prefill && e.phase() != seq_phase::decode,
                       "KV released while a job holds the sequence");
    bool held = holds_kv(e.phase());
    kv_release out{seq};
    if (options_.prefix_cache) {
        // The KvManager keeps (prefix cache) or frees the device KV itself; only valid KV may be kept.
        const auto& s = *e.seq;
        if (held && e.copy == device_copy::held && s.device_len > 0)
            out.cache = std::make_shared<const std::vector<token_id>>(s.tokens.begin(), s.tokens.begin() + s.device_len);
        out.scope = s.scope;
        held = false;
    }
    e.life.transition_to(seq_phase::released);
    entries_.erase(it);
    // Not granted: the KvManager drops the waiter, or the grant comes back and is returned.
    (void)kv_.tell(std::move(out), id());
    if (held) (void)device_.tell(da_kv_free{seq}, id());
    admit_pending();
}

void batch_tick_actor::admit_pending() {
    while (!pending_.empty()) {
        const auto d = plan_admission(admission_now(0));  // the head has nobody ahead of it
        if (d.verdict == admission::queue) return;
        bt_admit next = std::move(pending_.front());
        pending_.pop_front();
        if (d.verdict == admission::reject)
            (void)next.request.tell(device_dead_failure(), id());
        else
            admit(std::move(next));
    }
}

std::optional<device::slot> batch_tick_actor::free_slot() const {
    for (auto s : {device::slot::ping, device::slot::pong})
        if (slot_free_[device::index_of(s)]) return s;
    return std::nullopt;
}

// on_demand: a ready sequence whose next job would pass its reservation grows first.
// Only idle sequences are read: a job's holders write tokens and device_len meanwhile.
void batch_tick_actor::grow_where_needed() {
    for (auto& [sid, e] : entries_)
        if (e.phase() == seq_phase::ready && kv_needs_grow(std::int64_t(e.seq->tokens.size()), e.seq->kv_tokens))
            grow_kv(e, 0);
}

std::vector<seq_view> batch_tick_actor::views() const {
    std::vector<seq_view> out;
    out.reserve(entries_.size());
    for (const auto& [sid, e] : entries_) {
        const auto p = e.phase();
        if (!holds_kv(p) || p == seq_phase::finishing_job || p == seq_phase::finishing_grow) continue;
        // A prefill also when the device holds less than all but the last token: the next
        // chunk of a long prompt (runtime.prefill_chunk). A job's holders own the tokens of a
        // sequence in one: it is decoding when that job is a decode.
        const bool prefill = holds_job(p) ? p == seq_phase::prefill
                                          : e.copy != device_copy::held || e.seq->pending_tokens() > 1;
        out.push_back({sid, prefill, p == seq_phase::ready, e.seq->arrived, e.last_served, e.group,
                       p == seq_phase::awaiting, holds_job(p), p == seq_phase::prefill, chainable(e)});
    }
    return out;
}

// One more decode step may take this row's token from the device: it is in exactly one
// job, a decode whose draw the device makes, its KV holds the step and it is under
// max_tokens (fields of the sequence read here never change after admission).
bool batch_tick_actor::chainable(const entry& e) const {
    if (!options_.chain_tokens || e.chain_refused || e.phase() != seq_phase::decode || e.jobs != 1 ||
        e.copy != device_copy::held)
        return false;
    const auto& s = *e.seq;
    if (s.constraint || !model::head_can_sample(s.params)) return false;
    return e.tokens_after <= s.kv_tokens && e.tokens_after - s.prompt_len < s.max_tokens;
}

void batch_tick_actor::commit(const job_choice& choice, device::slot slot) {
    const int group = int(device::index_of(slot));
    std::vector<sequence_ptr> rows;
    rows.reserve(choice.rows.size());
    bool chain = false;
    for (auto sid : choice.rows) {
        entry& e = entries_.at(sid);
        if (!choice.prefill && e.phase() == seq_phase::decode) {
            // Chained: its input token is the draw of the job it is in (plan_next_job only
            // offers such a row when chainable()).
            CALSERVE_INVARIANT(chainable(e), "a row in a job joined another without chaining");
            ++e.jobs;
            ++e.tokens_after;
            e.group = group;
            chain = true;
            rows.push_back(e.seq);
            continue;
        }
        const bool first = e.copy == device_copy::none;
        if (e.copy != device_copy::held) {
            // Nothing of it on the device (any more): feed everything, or all after a prefix cache hit.
            e.seq->device_len = e.cached;
            if (metrics_ && e.copy == device_copy::lost) metrics_->requests_recovered.inc();  // after a reset or preemption
        }
        CALSERVE_INVARIANT(std::int64_t(e.seq->tokens.size()) <= e.seq->kv_tokens, "job past the KV reservation");
        e.life.transition_to(choice.prefill ? seq_phase::prefill : seq_phase::decode);
        e.jobs = 1;
        e.chain_refused = false;
        e.tokens_after = std::int64_t(e.seq->tokens.size()) + 1;
        e.copy = device_copy::held;
        e.cached = 0;
        if (!choice.prefill) e.group = group;
        if (first) (void)e.request.tell(rq_scheduled{}, id());
        rows.push_back(e.seq);
    }
    if (!choice.prefill) {
        // Members of this slot's group left out (the group grew past its cap) go to whichever slot frees next.
        for (auto& [sid, e] : entries_)
            if (e.group == group && !holds_job(e.phase())) e.group = k_no_group;
    }
    tick_ = after_job(tick_, choice);
    slot_free_[device::index_of(slot)] = false;
    (void)session_.tell(cs_run{slot, std::move(rows), choice.prefill, chain}, id());
}

void batch_tick_actor::schedule() {
    while (device_up_) {
        auto slot = free_slot();
        if (!slot) return;
        const auto other = *slot == device::slot::ping ? device::slot::pong : device::slot::ping;
        const bool other_busy = options_.max_inflight >= 2 && !slot_free_[device::index_of(other)];
        grow_where_needed();
        auto seqs = views();
        auto choice = plan_next_job(seqs, tick_, options_.policy, rt().now(),
                                    slot_view{int(device::index_of(*slot)), other_busy});
        if (!choice) return;
        commit(*choice, *slot);
    }
}

}  // namespace calserve::actors
