#include "actors/kv_manager_actor.hpp"

#include <algorithm>

#include "metrics/metrics.hpp"
#include "config/invariant.hpp"

namespace calserve::actors {

kv_manager_actor::kv_manager_actor(runtime& rt, std::int64_t total_blocks, std::int64_t block_tokens,
                                   metrics::calserve_metrics* metrics)
    : actor(rt, "kv_manager"), pool_(total_blocks, block_tokens), metrics_(metrics) {
    publish();
}

void kv_manager_actor::on_message(kv_manager_message& msg) {
    std::visit(
        [this](auto& m) {
            using T = std::decay_t<decltype(m)>;
            if constexpr (std::is_same_v<T, kv_reserve>) on_reserve(m);
            else if constexpr (std::is_same_v<T, kv_grow>) on_grow(m);
            else if constexpr (std::is_same_v<T, kv_extend>) on_extend(m);
            else if constexpr (std::is_same_v<T, kv_release>) on_release(m);
            else on_expired(m);
        },
        msg);
    CALSERVE_INVARIANT(pool_.conserved(), "KV blocks not conserved");
    publish();
}

bool kv_manager_actor::try_grant(kv_reserve& m) {
    auto plan = pool_.try_reserve(m.seq, m.tokens);
    if (!plan) return false;
    auto committed = pool_.commit(*plan);
    m.reply(kv_grant{m.seq, committed});
    return true;
}

void kv_manager_actor::on_reserve(kv_reserve& m) {
    if (!pool_.could_fit(std::max(m.tokens, m.full_tokens))) {
        m.reply(kv_grant{m.seq, make_error(status::context_overflow, "sequence larger than the whole KV cache")});
        return;
    }
    if (pool_.holds(m.seq)) {
        m.reply(kv_grant{m.seq, make_error(status::sequence_exists, "sequence already holds KV")});
        return;
    }
    if (waiters_.empty() && try_grant(m)) return;
    if (waiters_.size() >= k_kv_wait_queue) {
        m.reply(kv_grant{m.seq, make_error(status::queue_full, "KV wait queue full")});
        return;
    }
    auto delay = m.deadline - rt().now();
    auto seq = m.seq;
    // The expiry comes back as a message so it is traced like any other input.
    auto timer = start_timer(delay, [this, seq] { (void)enqueue(kv_wait_expired{seq}, id()); });
    bool front = m.front;
    if (front) {
        // Behind earlier preempted sequences, ahead of every new admission.
        auto it = std::find_if(waiters_.begin(), waiters_.end(), [](const waiter& w) { return !w.request.front; });
        waiters_.insert(it, waiter{std::move(m), timer});
        serve_waiters();
    } else {
        waiters_.push_back(waiter{std::move(m), timer});
    }
}

void kv_manager_actor::on_grow(kv_grow& m) {
    if (m.preempt != 0) pool_.release(m.preempt);
    void_result outcome = make_error(status::kv_full, "no free KV block to grow sequence " + std::to_string(m.seq));
    if (auto plan = pool_.try_grow(m.seq, m.tokens)) outcome = pool_.commit_grow(*plan);
    else if (!pool_.holds(m.seq)) outcome = make_error(status::unknown_sequence, "sequence " + std::to_string(m.seq));
    m.reply(kv_grant{m.seq, outcome});
    serve_waiters();
}

void kv_manager_actor::on_extend(const kv_extend& m) {
    auto r = pool_.extend(m.seq, m.length);
    CALSERVE_INVARIANT(r.ok(), "kv_extend: " + r.error().what());
}

void kv_manager_actor::on_release(const kv_release& m) {
    // A release may overtake nothing: a sequence still waiting is simply dropped.
    for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
        if (it->request.seq == m.seq) {
            it->timer.cancel();
            it->request.reply(kv_grant{m.seq, make_error(status::cancelled, "released while waiting")});
            waiters_.erase(it);
            break;
        }
    }
    pool_.release(m.seq);
    serve_waiters();
}

void kv_manager_actor::on_expired(const kv_wait_expired& m) {
    for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
        if (it->request.seq == m.seq) {
            it->request.reply(kv_grant{m.seq, make_error(status::kv_full, "no KV room before the deadline")});
            waiters_.erase(it);
            return;
        }
    }
}

void kv_manager_actor::serve_waiters() {
    while (!waiters_.empty() && try_grant(waiters_.front().request)) {
        waiters_.front().timer.cancel();
        waiters_.pop_front();
    }
}

void kv_manager_actor::publish() {
    if (!metrics_) return;
    metrics_->kv_blocks_used.set(double(pool_.used_blocks()));
    metrics_->kv_blocks_capacity.set(double(pool_.total_blocks()));
}

}  // namespace calserve::actors
