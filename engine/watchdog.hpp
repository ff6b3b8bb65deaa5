#pragma once
//! Watchdog: liveness checks that a state machine cannot make about itself.
//!
//!  - progress_watchdog: admitted work must make token progress. The engine
//!    notes each admission and each token/finish; while requests are in
//!    flight and nothing progressed for `bound`, the engine reports itself
//!    unhealthy (/health 503) so an orchestrator can restart it. A hung device
//!    that the DeviceActor's own timeouts miss, or a lost message, shows here.
//!  - mailbox_watch: an actor with queued messages whose delivered count did
//!    not move between two checks is stuck (a handler that never returns, a
//!    strand starved); each check reports such actors (the engine logs them).
//!
//! Fault model: both are observers, they never change scheduling. A bound of 0
//! disables the progress check. Invariants: thread-safe (atomics; mailbox_watch
//! is checked from one timer at a time); time is the runtime's clock, so the
//! same code runs in virtual time under the deterministic runtime.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace calserve::engine {

class progress_watchdog {
public:
    explicit progress_watchdog(std::chrono::nanoseconds bound) : bound_(bound) {}

    // A request was admitted; `was_idle` = nothing was in flight before it (the clock restarts).
    void on_admitted(std::chrono::nanoseconds now, bool was_idle) {
        if (was_idle) last_progress_ns_.store(now.count(), std::memory_order_relaxed);
    }
    // A token was emitted or a request ended.
    void on_progress(std::chrono::nanoseconds now) { last_progress_ns_.store(now.count(), std::memory_order_relaxed); }
    // True when work is in flight and nothing progressed for longer than the bound.
    bool stalled(std::chrono::nanoseconds now, std::int64_t in_flight) const;
    std::chrono::nanoseconds since_progress(std::chrono::nanoseconds now) const {
        return now - std::chrono::nanoseconds(last_progress_ns_.load(std::memory_order_relaxed));
    }
    std::chrono::nanoseconds bound() const { return bound_; }

private:
    std::chrono::nanoseconds bound_;
    std::atomic<std::int64_t> last_progress_ns_{0};
};

struct mailbox_probe {
    std::string name;
    std::function<std::size_t()> queued;       // messages waiting
    std::function<std::uint64_t()> delivered;  // messages handled so far
};

class mailbox_watch {
public:
    void add(mailbox_probe probe);
    // Names of actors that had messages queued at this check and delivered none
    // since the previous check (stuck for at least one check interval).
    std::vector<std::string> check();

private:
    struct watched {
        mailbox_probe probe;
        std::uint64_t last_delivered = 0;
        bool had_queue = false;
    };
    std::mutex mutex_;
    std::vector<watched> watched_;
};

}  // namespace calserve::engine
