#pragma once
//! Recovery policy as pure functions (STYLE 6), beside the scheduling policy: the
//! DeviceActor applies them; tests table-drive them without any actor.
//!
//! Job retries: a retryable refusal (submit_busy) or a capacity one (KV refused)
//! is retried after `retry_base` x 2^attempt, up to `retry_limit` retries, then
//! the job fails; the golden prefill of a warm-up retries only retryable
//! refusals (a busy queue is not a failed reset), with the same delays.
//! Resets: the first attempt of a recovery runs at once; each further attempt (a
//! reset that failed, or a warm-up/golden check that faulted again) waits
//! `reset_backoff` x 2^(failures - 1), capped at `reset_backoff_max`, with "equal
//! jitter" (a uniform draw in [d/2, d]); after more than `reset_limit`
//! consecutive failures the device gives up (dead).
#include <chrono>
#include <cstdint>
#include <random>

#include "config/status.hpp"

namespace calserve::actors {

// What a recovery carries through faulted, resetting and the warm-up after a fault.
struct recovery {
    std::chrono::nanoseconds since{0};   // when the fault was declared (recovery_seconds)
    int failed_resets = 0;               // consecutive failed attempts (resets, golden checks)
    friend bool operator==(const recovery&, const recovery&) = default;
};

// A job refused with `cls` after `attempt` retries is retried.
bool retries_job(fault_class cls, int attempt, int retry_limit);
// The golden prefill refused with `cls` after `attempt` retries is submitted again.
bool retries_golden(fault_class cls, int attempt, int retry_limit);
// The wait before retry `attempt` + 1: base x 2^attempt.
std::chrono::nanoseconds retry_delay(std::chrono::nanoseconds base, int attempt);

// What the next reset step of a recovery with `failed_resets` failures does.
enum class reset_next : std::uint8_t { attempt_now, attempt_after_backoff, give_up };
reset_next next_reset(int failed_resets, int reset_limit);

struct reset_backoff_params {
    std::chrono::nanoseconds base{std::chrono::milliseconds(50)};  // 0 = no wait between attempts
    std::chrono::nanoseconds max{std::chrono::seconds(5)};
};
// The backoff before the attempt after `failed_resets` failures, before jitter:
// base x 2^(failed_resets - 1), capped; 0 without a base or a failure.
std::chrono::nanoseconds reset_backoff_ceiling(const reset_backoff_params& p, int failed_resets);
// Equal jitter: a uniform draw in [d/2, d] from `gen` (d itself when d <= 1 ns, drawing nothing).
template <class Generator>
std::chrono::nanoseconds equal_jitter(std::chrono::nanoseconds d, Generator& gen) {
    if (d.count() <= 1) return d;
    std::uniform_int_distribution<std::int64_t> half(d.count() / 2, d.count());
    return std::chrono::nanoseconds{half(gen)};
}

}  // namespace calserve::actors
