#pragma once
//! Messages the DeviceActor accepts.
#include <string>
#include <variant>

#include "actors/job_context.hpp"
#include "config/result.hpp"
#include "device/device.hpp"

namespace calserve::actors {

struct da_start {};                       // configure + warm-up + golden check
struct da_execute {                       // ChipSession: fill, infer and wait for this job
    job_ptr job;
    int attempt = 0;                      // retries of a retryable/capacity refusal
};
struct da_completed {                     // the device's completion callback (posted back)
    std::uint64_t generation = 0;
    job_ptr job;
    result<device::job_result> outcome;
};
struct da_golden_done {
    std::uint64_t generation = 0;
    result<device::job_result> outcome;
};
struct da_kv_free {                       // KvManager: the sequence is gone (released, preempted, evicted)
    std::uint64_t seq = 0;
};
struct da_kv_copy {                       // KvManager: a prefix cache hit (seq copy)
    std::uint64_t src = 0;
    std::uint64_t dst = 0;
    std::int64_t tokens = 0;                 // positions copied
    std::int64_t reserve = 0;                // dst's reservation (kv_allocate)
    std::uint64_t generation = 0;            // the device generation src's KV was kept in (KvManager)
};
struct da_kv_keep {                       // KvManager: a sequence becomes a cache entry (seq keep)
    std::uint64_t seq = 0;
    std::int64_t tokens = 0;
    std::uint64_t generation = 0;            // the device generation its KV was written in (KvManager)
};
struct da_reset {                         // control socket or a fault: reset now
    std::string reason;
};
struct da_reset_step {                    // internal: (re)try the reset after a backoff
    std::uint64_t generation = 0;
};
struct da_golden_retry {                  // internal: submit the golden job again after a busy refusal
    std::uint64_t generation = 0;
    int attempt = 0;
};

using device_actor_message =
    std::variant<da_start, da_execute, da_completed, da_golden_done, da_kv_free, da_kv_copy, da_kv_keep, da_reset,
                 da_reset_step, da_golden_retry>;

}  // namespace calserve::actors
