#pragma once
//! KvManager: the session's KV budget (one per session).
//!
//! Applies `kv_pool` (plan/commit) to messages: `kv_reserve` is granted at once
//! when the plan fits and nobody waits before it (FCFS), else queued in a
//! bounded wait queue (k_kv_wait_queue) with a deadline timer; `kv_release`
//! returns blocks and serves waiters in order. A request that can never fit is
//! refused with context_overflow; a full queue answers queue_full; a waiter
//! whose deadline passes gets kv_full. No wait is unbounded. `kv_grow` (a
//! running sequence under on-demand KV) never waits: free blocks or kv_full, and
//! it goes before waiters (running work first); a preempted sequence's
//! re-reservation (`front`) waits ahead of new admissions.
//! Invariant: the pool is conserved after every message (checked).
#include <deque>
#include <optional>

#include "actors/runtime/actor.hpp"
#include "actors/kv_manager_messages.hpp"

namespace calserve::metrics {
struct calserve_metrics;
}

namespace calserve::actors {

inline constexpr std::size_t k_kv_wait_queue = 1024;

class kv_manager_actor : public actor<kv_manager_actor, kv_manager_message> {
public:
    kv_manager_actor(runtime& rt, std::int64_t total_blocks, std::int64_t block_tokens,
                     metrics::calserve_metrics* metrics);

    void on_message(kv_manager_message& msg);

    // Read by tests and the soak on the actor's strand (or when idle).
    const kv_pool& pool() const { return pool_; }
    std::size_t waiting() const { return waiters_.size(); }

private:
    struct waiter {
        kv_reserve request;
        timer_handle timer;
    };
    void on_reserve(kv_reserve& m);
    void on_grow(kv_grow& m);
    void on_extend(const kv_extend& m);
    void on_release(const kv_release& m);
    void on_expired(const kv_wait_expired& m);
    bool try_grant(kv_reserve& m);
    void serve_waiters();
    void publish();

    kv_pool pool_;
    std::deque<waiter> waiters_;
    metrics::calserve_metrics* metrics_;
};

}  // namespace calserve::actors
