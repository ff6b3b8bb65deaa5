#pragma once
//! Messages the KvManager accepts.
#include <chrono>
#include <variant>

#include "actors/runtime/ask.hpp"
#include "actors/kv_pool.hpp"

namespace calserve::actors {

struct kv_grant {
    sequence_id seq = 0;
    void_result outcome;  // ok, kv_full (deadline passed), context_overflow (never fits), queue_full
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
};
// Grow a running sequence's reservation to `tokens`, never waiting: granted from
// free blocks, else kv_full (the BatchTick then preempts). With `preempt` != 0 that
// sequence's blocks are released first, in the same step, before any waiter is
// served, so the freed room goes to the grower.
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
struct kv_release {
    sequence_id seq = 0;
};
struct kv_wait_expired {
    sequence_id seq = 0;
};
using kv_manager_message = std::variant<kv_reserve, kv_grow, kv_extend, kv_release, kv_wait_expired>;

}  // namespace calserve::actors
