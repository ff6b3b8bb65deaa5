#pragma once
//! Messages the KvManager accepts.
#include <chrono>
#include <variant>

#include "actors/ask.hpp"
#include "actors/kv_pool.hpp"

namespace calserve::actors {

struct kv_grant {
    sequence_id seq = 0;
    void_result outcome;  // ok, kv_full (deadline passed), context_overflow (never fits), queue_full
};
// Reserve room for `tokens`; waits (bounded queue, until `deadline`) when full.
struct kv_reserve {
    sequence_id seq = 0;
    std::int64_t tokens = 0;
    std::chrono::nanoseconds deadline{0};  // runtime time
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
using kv_manager_message = std::variant<kv_reserve, kv_extend, kv_release, kv_wait_expired>;

}  // namespace calserve::actors
