#include "actors/batch_tick_actor.hpp"

#include <algorithm>
#include <spdlog/spdlog.h>

#include "actors/chip_session_actor.hpp"
#include "actors/device_actor.hpp"
#include "actors/kv_manager_actor.hpp"
#include "metrics/metrics.hpp"
#include "actors/request_actor.hpp"
#include "config/invariant.hpp"

namespace calserve::actors {

namespace {
// A preempted sequence waits for KV as long as its request lives (its own deadline ends it).
constexpr std::chrono::nanoseconds k_preempted_kv_wait = std::chrono::hours(24);
}  // namespace

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
        for (const auto& [id, e] : entries_) running += e.kv_granted ? 1 : 0;
        metrics_->requests_running.set(double(running));
        metrics_->requests_waiting.set(double(pending_.size() + entries_.size() - std::size_t(running)));
    }
}

void batch_tick_actor::on(bt_admit& m) {
    if (dead_) {
        (void)m.request.tell(rq_failed{make_error(status::device_dead, "device is dead")}, id());
        return;
    }
    if (std::int64_t(entries_.size()) >= options_.max_running) {
        pending_.push_back(std::move(m));
        return;
    }
    auto& e = entries_[m.seq->seq];
    e.seq = std::move(m.seq);
    e.request = std::move(m.request);
    e.admitted = ++admitted_;
    request_kv(e, false);
}

std::int64_t batch_tick_actor::round_to_blocks(const entry& e, std::int64_t tokens) const {
    const std::int64_t block = std::max<std::int64_t>(1, options_.kv_block_tokens);
    return std::min(e.seq->full_tokens, (tokens + block - 1) / block * block);
}

void batch_tick_actor::request_kv(entry& e, bool front) {
    auto& seq = *e.seq;
    std::int64_t want = seq.full_tokens;
    if (options_.kv == kv_policy::on_demand)
        want = std::min(seq.full_tokens, std::int64_t(seq.tokens.size()) + options_.kv_step_tokens);
    want = round_to_blocks(e, want);
    auto self = address<batch_tick_actor>(shared_from_this());
    auto me = id();
    auto deadline = rt().now() + (front ? k_preempted_kv_wait : options_.kv_wait);
    kv_reserve reserve{seq.seq, want, deadline,
                       [self, me](kv_grant g) {
                           (void)self.tell(bt_kv_granted{g.seq, g.outcome, g.cached_tokens}, me);
                       },
                       seq.full_tokens, front, nullptr, cache_key{}};
    if (options_.prefix_cache) {
        reserve.prefix = std::make_shared<const std::vector<token_id>>(seq.tokens);
        reserve.scope = seq.scope;
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
    if (e.finishing) {
        release(m.seq);
        return;
    }
    if (!m.outcome.ok()) {
        (void)e.request.tell(rq_failed{m.outcome.error()}, id());
        entries_.erase(it);  // nothing held: the Request's bt_finish will find no entry
        admit_pending();
        return;
    }
    e.kv_granted = true;
    if (m.cached_tokens > 0) {
        // Its first tokens' KV is being copied in: the prefill feeds the rest.
        e.seq->device_len = m.cached_tokens;
        e.seq->cached_tokens = m.cached_tokens;
        e.reprefill = false;
        e.on_device = false;
    }
    schedule();
}

// On-demand growth: the next job would pass the reservation.
bool batch_tick_actor::needs_room(const entry& e) const {
    return e.kv_granted && std::int64_t(e.seq->tokens.size()) > e.seq->kv_tokens;
}

void batch_tick_actor::grow_kv(entry& e, sequence_id preempt) {
    const std::int64_t want =
        round_to_blocks(e, std::int64_t(e.seq->tokens.size()) + options_.kv_step_tokens);
    auto self = address<batch_tick_actor>(shared_from_this());
    auto me = id();
    e.growing = true;
    (void)kv_.tell(kv_grow{e.seq->seq, want, preempt,
                           [self, me, want](kv_grant g) { (void)self.tell(bt_kv_grown{g.seq, want, g.outcome}, me); }},
                   id());
}

void batch_tick_actor::on(bt_kv_grown& m) {
    auto it = entries_.find(m.seq);
    if (it == entries_.end() || !it->second.growing) return;  // gone, or preempted since it asked
    entry& e = it->second;
    e.growing = false;
    if (e.finishing) {
        if (!e.job_active) release(m.seq);
        return;
    }
    if (m.outcome.ok()) {
        e.seq->kv_tokens = m.tokens;
    } else if (m.outcome.code() == status::kv_full) {
        preempt(e);
    }
    schedule();
}

// No free block for `grower`: free the most recently admitted sequence not in a job.
void batch_tick_actor::preempt(entry& grower) {
    std::vector<victim_view> candidates;
    for (const auto& [sid, e] : entries_)
        if (e.kv_granted && !e.job_active && !e.finishing && (!e.growing || &e == &grower))
            candidates.push_back({sid, e.admitted});
    auto victim_id = plan_victim(candidates);
    if (!victim_id) return;  // cannot happen: the grower itself is a candidate
    entry& v = entries_.at(*victim_id);
    ++preemptions_;
    if (metrics_) metrics_->preemptions_total.inc();
    v.kv_granted = false;
    v.growing = false;
    v.reprefill = true;
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
    job_ended(m.rows, job_end::completed);
    for (auto seq : m.unrun)
        if (auto it = entries_.find(seq); it != entries_.end()) it->second.awaiting = false;
    for (auto seq : m.go_on) {
        auto it = entries_.find(seq);
        if (it == entries_.end() || it->second.finishing || !it->second.awaiting) continue;
        it->second.awaiting = false;
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
void batch_tick_actor::job_ended(const std::vector<sequence_id>& rows, job_end how) {
    for (auto seq : rows) {
        auto it = entries_.find(seq);
        if (it == entries_.end()) continue;
        entry& e = it->second;
        e.job_active = false;
        if (how == job_end::completed) {
            e.seq->failed_jobs = 0;
        } else {
            e.awaiting = false;
            e.reprefill = true;
            if (how == job_end::failed && ++e.seq->failed_jobs > options_.max_job_retries && !e.finishing) {
                give_up(seq, e);
                continue;
            }
        }
        if (e.finishing) release(seq);
    }
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
        it->second.awaiting = false;
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
    it->second.finishing = true;
    it->second.awaiting = false;
    if (!it->second.job_active && !it->second.growing) release(m.seq);
    schedule();
}

void batch_tick_actor::on(bt_device_down&) {
    device_up_ = false;
    for (auto& [id, e] : entries_) e.reprefill = true;
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
    for (auto& [id, e] : entries_) (void)e.request.tell(rq_failed{make_error(status::device_dead, "device is dead")}, this->id());
    for (auto& p : pending_) (void)p.request.tell(rq_failed{make_error(status::device_dead, "device is dead")}, id());
    pending_.clear();
}

void batch_tick_actor::release(sequence_id seq) {
    auto it = entries_.find(seq);
    if (it == entries_.end()) return;
    CALSERVE_INVARIANT(!it->second.job_active, "KV released while a job holds the sequence");
    const entry& e = it->second;
    bool held = e.kv_granted;
    kv_release out{seq};
    if (options_.prefix_cache) {
        // The KvManager keeps or frees the device KV itself; only valid KV may be kept.
        const auto& s = *e.seq;
        if (held && e.on_device && !e.reprefill && s.device_len > 0)
            out.cache = std::make_shared<const std::vector<token_id>>(s.tokens.begin(), s.tokens.begin() + s.device_len);
        out.scope = s.scope;
        held = false;
    }
    entries_.erase(it);
    // Not granted: the KvManager drops the waiter, or the grant comes back and is returned.
    (void)kv_.tell(std::move(out), id());
    if (held) (void)device_.tell(da_kv_free{seq}, id());
    admit_pending();
}

void batch_tick_actor::admit_pending() {
    while (!pending_.empty() && std::int64_t(entries_.size()) < options_.max_running) {
        bt_admit next = std::move(pending_.front());
        pending_.pop_front();
        on(next);
    }
}

std::optional<device::slot> batch_tick_actor::free_slot() const {
    for (auto s : {device::slot::ping, device::slot::pong})
        if (slot_free_[device::index_of(s)]) return s;
    return std::nullopt;
}

std::vector<seq_view> batch_tick_actor::views() {
    std::vector<seq_view> out;
    out.reserve(entries_.size());
    for (auto& [sid, e] : entries_) {
        if (!e.kv_granted || e.finishing) continue;
        // Only idle sequences are read: a job's holders write tokens and device_len meanwhile.
        // A prefill also when the device holds less than all but the last token: a
        // prompt partly prefilled (chunks) or partly copied from the prefix cache.
        const bool prefill = e.reprefill || !e.on_device || e.seq->pending_tokens() > 1;
        const bool idle = !e.job_active && !e.awaiting;
        if (idle && !e.growing && needs_room(e)) grow_kv(e, 0);
        const bool ready = idle && !e.growing;
        out.push_back({sid, prefill, ready, e.seq->arrived, e.last_served, e.group, e.awaiting && !e.job_active,
                       e.job_active, e.job_active && e.in_prefill});
    }
    return out;
}

void batch_tick_actor::commit(const job_choice& choice, device::slot slot) {
    const int group = int(device::index_of(slot));
    std::vector<sequence_ptr> rows;
    rows.reserve(choice.rows.size());
    for (auto sid : choice.rows) {
        entry& e = entries_.at(sid);
        if (e.reprefill) {
            e.seq->device_len = 0;  // the device lost this sequence's KV: feed everything again
            e.reprefill = false;
            if (metrics_ && e.started) metrics_->requests_recovered.inc();  // resumed after a reset or preemption
        }
        CALSERVE_INVARIANT(std::int64_t(e.seq->tokens.size()) <= e.seq->kv_tokens, "job past the KV reservation");
        e.job_active = true;
        e.in_prefill = choice.prefill;
        e.awaiting = true;
        e.on_device = true;
        if (!choice.prefill) e.group = group;
        if (!e.started) {
            e.started = true;
            (void)e.request.tell(rq_scheduled{}, id());
        }
        rows.push_back(e.seq);
    }
    if (!choice.prefill) {
        // Members of this slot's group left out (the group grew past its cap) go to whichever slot frees next.
        for (auto& [sid, e] : entries_)
            if (e.group == group && !e.job_active) e.group = k_no_group;
    }
    tick_ = after_job(tick_, choice);
    slot_free_[device::index_of(slot)] = false;
    (void)session_.tell(cs_run{slot, std::move(rows), choice.prefill}, id());
}

void batch_tick_actor::schedule() {
    while (device_up_) {
        auto slot = free_slot();
        if (!slot) return;
        const auto other = *slot == device::slot::ping ? device::slot::pong : device::slot::ping;
        const bool other_busy = options_.max_inflight >= 2 && !slot_free_[device::index_of(other)];
        auto seqs = views();
        auto choice = plan_next_job(seqs, tick_, options_.policy, rt().now(),
                                    slot_view{int(device::index_of(*slot)), other_busy});
        if (!choice) return;
        commit(*choice, *slot);
    }
}

}  // namespace calserve::actors
