#pragma once
//! Messages the KvManager accepts.
#include <chrono>
#include <memory>
#include <optional>
#include <vector>
#include <variant>

#include "actors/runtime/ask.hpp"
#include "actors/kv_pool.hpp"
#include "actors/prefix_cache.hpp"

namespace calserve::actors {

struct kv_grant {
    kv_grant() = default;
    kv_grant(sequence_id s, void_result o, std::int64_t cached = 0) : seq(s), outcome(std::move(o)), cached_tokens(cached) {}
    sequence_id seq = 0;
    void_result outcome;  // ok, kv_full (deadline passed), context_overflow (never fits), queue_full
    // A prefix cache hit: the first `cached_tokens` tokens' KV is being copied from a
    // cached sequence (da_kv_copy, sent before this grant); prefill the rest.
    std::int64_t cached_tokens = 0;
};
// Reserve room for `tokens`; waits (bounded queue, until `deadline`) when full.
// `full_tokens` (>= tokens) is the most the sequence will ever hold: refused with
// context_overflow at once when even an empty pool could not hold it. A preempted
// sequence re-reserves with `front`: it waits ahead of new admissions.
struct kv_reserve {
    sequence_id seq = 0;
    std::int64_t tokens = 0;
    std::chrono::nanoseconds deadline{0};  // runtime time
    reply_to<kv_grant> reply;
    std::int64_t full_tokens = 0;
    bool front = false;
    // Prefix cache lookup: the tokens the sequence's next prefill feeds from position 0,
    // and the scope they may be shared in (null: no lookup).
    std::shared_ptr<const std::vector<prefix_cache::token>> prefix;
    cache_key scope{};
};
// Grow a running sequence's reservation to `tokens`, never waiting: granted from
// free blocks, else kv_full (the BatchTick then preempts). With `preempt` != 0 that
// sequence's blocks are released (and its device KV freed) first, in the same step,
// before any waiter is served, so the freed room goes to the grower.
struct kv_grow {
    sequence_id seq = 0;
    std::int64_t tokens = 0;
    sequence_id preempt = 0;
    reply_to<kv_grant> reply;
};
struct kv_extend {
    sequence_id seq = 0;
    std::int64_t length = 0;
};
// Returns the sequence's blocks; the KvManager frees its device KV (da_kv_free) unless
// it keeps it. With `cache`, the tokens its device KV holds: their whole cache blocks may
// stay cached (seq keep) instead of being freed. `granted`: the BatchTick took the grant,
// so jobs may have written the sequence's KV on the device; a grant that came back unused
// (its request ended while it was on its way) holds on the device only what a prefix
// cache hit copied in.
struct kv_release {
    kv_release() = default;
    kv_release(sequence_id s, bool g, std::shared_ptr<const std::vector<prefix_cache::token>> c = {}, cache_key k = {})
        : seq(s), granted(g), cache(std::move(c)), scope(k) {}
    sequence_id seq = 0;
    bool granted = false;
    std::shared_ptr<const std::vector<prefix_cache::token>> cache;
    cache_key scope{};
};
// A running sequence's prefill has written `tokens` (its prompt) to the device: their
// whole cache blocks are indexed as a running entry (prefix_cache.hpp) until it is
// released, so requests arriving meanwhile copy them instead of prefilling them.
struct kv_share {
    sequence_id seq = 0;
    std::shared_ptr<const std::vector<prefix_cache::token>> tokens;
    cache_key scope{};
};
// The device lost every KV sequence (reset, device_lost): drop the cached ones.
struct kv_drop_cache {
    bool free_on_device = false;  // the device still holds them (an operator emptying the cache)
    // A device fault or reset: the generation the device's (empty) KV is in from now on.
    // Copies and keeps are stamped with it, so one decided before the KvManager heard of
    // the reset is dropped by the DeviceActor instead of naming a sequence the reset freed.
    std::optional<std::uint64_t> generation;
};
struct kv_wait_expired {
    sequence_id seq = 0;
};
using kv_manager_message =
    std::variant<kv_reserve, kv_grow, kv_extend, kv_release, kv_wait_expired, kv_drop_cache, kv_share>;

}  // namespace calserve::actors
