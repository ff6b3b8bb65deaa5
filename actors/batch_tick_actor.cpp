#include "actors/batch_tick_actor.hpp"

#include "actors/chip_session_actor.hpp"
#include "actors/device_actor.hpp"
#include "actors/kv_manager_actor.hpp"
#include "actors/metrics.hpp"
#include "actors/request_actor.hpp"
#include "config/invariant.hpp"

namespace calserve::actors {

batch_tick_actor::batch_tick_actor(runtime& rt, batch_tick_options options, metrics::calserve_metrics* metrics)
    : actor(rt, "batch_tick"), options_(options), metrics_(metrics) {
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
    request_kv(e);
}

void batch_tick_actor::request_kv(entry& e) {
    auto self = address<batch_tick_actor>(shared_from_this());
    auto me = id();
    (void)kv_.tell(kv_reserve{e.seq->seq, e.seq->kv_tokens, rt().now() + options_.kv_wait,
                              [self, me](kv_grant g) { (void)self.tell(bt_kv_granted{g.seq, g.outcome}, me); }},
                   id());
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
    schedule();
}

void batch_tick_actor::on(bt_slot_free& m) {
    slot_free_[device::index_of(m.slot)] = true;
    if (auto it = entries_.find(m.seq); it != entries_.end()) {
        it->second.job_active = false;
        if (it->second.finishing) release(m.seq);
    }
    schedule();
}

void batch_tick_actor::on(bt_continue& m) {
    if (auto it = entries_.find(m.seq); it != entries_.end()) {
        it->second.awaiting = false;
        it->second.last_served = rt().now();
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
    if (!it->second.job_active) release(m.seq);
    schedule();
}

void batch_tick_actor::on(bt_job_lost& m) {
    slot_free_[device::index_of(m.slot)] = true;
    if (auto it = entries_.find(m.seq); it != entries_.end()) {
        it->second.job_active = false;
        it->second.awaiting = false;
        it->second.reprefill = true;
        if (it->second.finishing) release(m.seq);
    }
}

void batch_tick_actor::on(bt_device_down&) {
    device_up_ = false;
    for (auto& [id, e] : entries_) e.reprefill = true;
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
    bool held = it->second.kv_granted;
    entries_.erase(it);
    if (held) {
        (void)kv_.tell(kv_release{seq}, id());
        (void)device_.tell(da_kv_free{seq}, id());
    }
    // Not granted yet: the KvManager drops the waiter, or the grant comes back and is returned.
    if (!held) (void)kv_.tell(kv_release{seq}, id());
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

void batch_tick_actor::schedule() {
    while (device_up_) {
        auto slot = free_slot();
        if (!slot) return;
        std::vector<seq_view> views;
        views.reserve(entries_.size());
        for (const auto& [id, e] : entries_) {
            if (!e.kv_granted || e.finishing) continue;
            bool prefill = e.reprefill || e.seq->device_len == 0;
            views.push_back({id, prefill, !e.job_active && !e.awaiting, e.seq->arrived, e.last_served});
        }
        auto choice = plan_next_job(views, tick_, options_.policy, rt().now());
        if (!choice) return;
        tick_ = after_job(tick_, *choice);
        entry& e = entries_.at(choice->seq);
        if (e.reprefill) {
            e.seq->device_len = 0;  // the device lost this sequence's KV: feed everything again
            e.reprefill = false;
            if (metrics_ && e.started) metrics_->requests_recovered.inc();  // resumed after a device reset
        }
        e.job_active = true;
        e.awaiting = true;
        slot_free_[device::index_of(*slot)] = false;
        if (!e.started) {
            e.started = true;
            (void)e.request.tell(rq_scheduled{}, id());
        }
        (void)session_.tell(cs_run{*slot, e.seq, e.seq->device_len == 0}, id());
    }
}

}  // namespace calserve::actors
