#pragma once
//! KvManager: the session's KV budget (one per session), and the one owner of every
//! sequence's KV on the device: it alone tells the DeviceActor to copy (da_kv_copy),
//! keep (da_kv_keep) or free (da_kv_free) a sequence's KV, whatever the cache setting,
//! so those operations reach the device in the order it decided them. Every block
//! going back and every device free passes one function (`end_kv`).
//!
//! Applies `kv_pool` (plan/commit) to messages: `kv_reserve` is granted at once
//! when the plan fits and nobody waits before it (FCFS), else queued in a
//! bounded wait queue (k_kv_wait_queue) with a deadline timer; `kv_release`
//! returns blocks, frees the sequence's device KV (or keeps it, below) and serves
//! waiters in order; `kv_grow` with `preempt` does the same for the victim. A request that can never fit is
//! refused with context_overflow; a full queue answers queue_full; a waiter
//! whose deadline passes gets kv_full. No wait is unbounded. `kv_grow` (a
//! running sequence under on-demand KV) never waits: free blocks or kv_full, and
//! it goes before waiters (running work first); a preempted sequence's
//! re-reservation (`front`) waits ahead of new admissions.
//!
//! Prefix cache (`kv_cache_options::enabled`, actors/prefix_cache.hpp): a released
//! sequence whose device KV is valid stays as a cache entry of its whole cache
//! blocks (da_kv_keep), its pool blocks *cached*. A reservation that carries its
//! tokens looks them up when it is granted; a hit sends da_kv_copy (cached entry ->
//! the new sequence) to the DeviceActor before the grant, so any later free of
//! the entry reaches the device after the copy. Entries are evicted least recently
//! used, and only when a reservation or a grow would otherwise wait or fail, so the
//! cache never causes a refusal, a wait or a preemption. kv_drop_cache (a device
//! reset) drops every entry. kv_share indexes a running sequence's prompt as a
//! running entry (no blocks of its own: they stay the sequence's), removed when the
//! sequence is released.
//! Invariant: the pool is conserved after every message, and its cached holdings are
//! exactly the cache's entries (checked).
#include <deque>
#include <optional>
#include <unordered_set>

#include "actors/runtime/actor.hpp"
#include "actors/kv_manager_messages.hpp"

namespace calserve::metrics {
struct calserve_metrics;
}

namespace calserve::actors {

class device_actor;

inline constexpr std::size_t k_kv_wait_queue = 1024;

struct kv_cache_options {
    bool enabled = false;
    std::int64_t block_tokens = 64;  // cache granularity: prefixes are reused in whole blocks of this many tokens
};

class kv_manager_actor : public actor<kv_manager_actor, kv_manager_message> {
public:
    kv_manager_actor(runtime& rt, std::int64_t total_blocks, std::int64_t block_tokens,
                     metrics::calserve_metrics* metrics, kv_cache_options cache = {});
    // Where cache entries are kept, copied and freed (needed when the cache is enabled).
    void wire(address<device_actor> device);

    void on_message(kv_manager_message& msg);

    // Read by tests and the soak on the actor's strand (or when idle).
    const kv_pool& pool() const { return pool_; }
    const prefix_cache& cache() const { return cache_; }
    bool cache_enabled() const { return cache_options_.enabled; }
    std::int64_t cache_hits() const { return hit_tokens_; }  // prompt tokens served from cached KV
    std::size_t waiting() const { return waiters_.size(); }
    std::size_t keys_held() const { return prompt_traces_.size(); }  // tests: none once every sequence is released

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
    void on_drop(const kv_drop_cache& m);
    void on_share(const kv_share& m);
    bool try_grant(kv_reserve& m);
    // Evicts cached entries (least recently used first, never `keep`) until `blocks`
    // are free; false, evicting nothing, when even every entry would not free them.
    bool make_room(std::int64_t blocks, sequence_id keep);
    void evict(sequence_id seq);
    // Why a sequence's blocks go back: whether its device KV is freed and whether a cache
    // entry ended.
    enum class kv_end : std::uint8_t {
        released,           // its sequence ended or was preempted: free its device KV
        returned,           // a grant came back unused: free only what a cache hit copied in
        evicted,            // a cache entry made room or became redundant: free it
        dropped_on_device,  // the cache emptied while the device keeps its KV: free it
        device_lost,        // the cache emptied because the device lost every sequence
    };
    void end_kv(sequence_id seq, kv_end why);
    bool cache_on_release(const kv_release& m);
    void serve_waiters();
    void publish();

    kv_pool pool_;
    kv_cache_options cache_options_;
    prefix_cache cache_;
    address<device_actor> device_;
    std::int64_t hit_tokens_ = 0;
    // The device generation its cached KV lives in (kv_drop_cache names each new one): its
    // copies and keeps carry it, and the DeviceActor drops those from an older one.
    std::uint64_t device_generation_ = 0;
    // What a granted sequence's lookup found (keys hashed, entry compared), until its
    // kv_share (or release) uses it.
    std::unordered_map<sequence_id, prefix_cache::lookup_trace> prompt_traces_;
    // Granted sequences a cache hit copied KV into (da_kv_copy): the device holds KV for
    // them even if their grant comes back unused. Left at their release or keep.
    std::unordered_set<sequence_id> copied_into_;
    std::deque<waiter> waiters_;
    metrics::calserve_metrics* metrics_;
};

}  // namespace calserve::actors
