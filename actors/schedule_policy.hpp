#pragma once
//! Scheduling policy as pure functions (STYLE 6): the BatchTick and the engine
//! apply them; tests table-drive them without any actor.
//!
//! plan_next_job: which sequence runs in the slot that just freed.
//!   - decode first: sequences with a token to decode are served round-robin
//!     (least recently served first), so two runnable sequences alternate on
//!     ping/pong;
//!   - a waiting prefill is taken when no decode is ready, or when every
//!     running decoder has advanced once since the last prefill, up to
//!     `prefill_budget` prefills in a row;
//!   - prefills are FCFS by arrival; one that has waited `ageing` or more goes
//!     before any decode (no starvation).
//! plan_admission: admit now, queue, or reject with the status to report.
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>

#include "config/status.hpp"

namespace calserve::actors {

using std::chrono::nanoseconds;

struct seq_view {
    std::uint64_t seq = 0;
    bool needs_prefill = false;   // admitted, prompt not yet on the device
    bool ready = false;           // not in flight and has work (prefill or a token to decode)
    nanoseconds arrived{0};
    nanoseconds last_served{0};
};

struct tick_state {
    int prefills_in_a_row = 0;
    int decodes_since_prefill = 0;
};

struct schedule_params {
    int prefill_budget = 1;
    nanoseconds ageing = std::chrono::seconds(2);
};

struct job_choice {
    std::uint64_t seq = 0;
    bool prefill = false;
    friend bool operator==(const job_choice&, const job_choice&) = default;
};

std::optional<job_choice> plan_next_job(std::span<const seq_view> seqs, const tick_state& state,
                                        const schedule_params& params, nanoseconds now);
// Updates the counters after `choice` was scheduled.
tick_state after_job(tick_state state, const job_choice& choice);

struct admission_input {
    std::int64_t running = 0;        // admitted sequences holding KV
    std::int64_t queued = 0;         // waiting for admission
    std::int64_t max_running = 0;
    std::int64_t max_queued = 0;
    bool kv_fits_now = false;        // try_reserve would succeed
    bool kv_could_ever_fit = true;   // the sequence fits an empty pool
    bool accepting = true;           // not draining, device usable
};

enum class admission : std::uint8_t { admit, queue, reject };
struct admission_decision {
    admission verdict = admission::reject;
    status reason = status::ok;
    friend bool operator==(const admission_decision&, const admission_decision&) = default;
};

admission_decision plan_admission(const admission_input& in);

}  // namespace calserve::actors
