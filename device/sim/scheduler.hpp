#pragma once
//! The simulator's notion of time. The simulator never owns its clock: it is handed
//! a `sim_scheduler` (time now, and "call fn at time t"). Two implementations:
//!   - `realtime_scheduler`: steady_clock and one timer thread (condition-variable
//!     waits, never busy loops); callbacks run on that thread.
//!   - `manual_scheduler`: virtual time that only moves when someone drives it
//!     (`advance_to`, `run_until_idle`, or a blocking device `wait` through
//!     `drive_until`); callbacks run on the driving thread. Deterministic.
//! The runtime's deterministic executor can implement the interface over its own
//! virtual clock instead.
//!
//! Invariants: events fire in (time, insertion) order, so two events due at the
//! same instant keep the order they were scheduled in; a callback may schedule
//! more events; `now()` never goes backwards.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

namespace calserve::device::sim {

using sim_time = std::chrono::nanoseconds;  // since the scheduler's epoch
using sim_callback = std::function<void()>;

class sim_scheduler {
public:
    virtual ~sim_scheduler() = default;
    virtual sim_time now() const = 0;
    virtual void call_at(sim_time when, sim_callback fn) = 0;
    // True when time is virtual and the caller may drive it (deterministic mode).
    virtual bool is_virtual() const = 0;
    // Virtual schedulers run due events on the calling thread until `done()` holds or
    // virtual time would pass `deadline`, then set time to min(deadline, next event)
    // and return true. Real-time schedulers return false: callers block on their own.
    virtual bool drive_until(const std::function<bool()>& done, sim_time deadline) {
        (void)done;
        (void)deadline;
        return false;
    }
};

// Shared event queue ordered by (time, sequence).
class event_queue {
public:
    void push(sim_time when, sim_callback fn);
    bool empty() const { return heap_.empty(); }
    sim_time next_time() const { return heap_.top().when; }
    sim_callback pop();
    std::size_t size() const { return heap_.size(); }
    void clear() { heap_ = {}; }

private:
    struct event {
        sim_time when;
        std::uint64_t seq;
        mutable sim_callback fn;
        bool operator>(const event& o) const { return when != o.when ? when > o.when : seq > o.seq; }
    };
    std::priority_queue<event, std::vector<event>, std::greater<>> heap_;
    std::uint64_t next_seq_ = 0;
};

class realtime_scheduler final : public sim_scheduler {
public:
    realtime_scheduler();
    ~realtime_scheduler() override;
    realtime_scheduler(const realtime_scheduler&) = delete;
    realtime_scheduler& operator=(const realtime_scheduler&) = delete;

    sim_time now() const override;
    void call_at(sim_time when, sim_callback fn) override;
    bool is_virtual() const override { return false; }

private:
    void run(std::stop_token stop);

    std::chrono::steady_clock::time_point epoch_;
    std::mutex mutex_;
    std::condition_variable_any cv_;
    event_queue queue_;
    std::uint64_t generation_ = 0;  // bumped per push: wakes the timer thread for earlier events
    std::jthread thread_;  // last member: started after the rest is built, joined first
};

class manual_scheduler final : public sim_scheduler {
public:
    sim_time now() const override;
    void call_at(sim_time when, sim_callback fn) override;
    bool is_virtual() const override { return true; }
    bool drive_until(const std::function<bool()>& done, sim_time deadline) override;

    // Runs every event due at or before `t`, then sets now = t.
    void advance_to(sim_time t);
    void advance_by(sim_time d) { advance_to(now() + d); }
    // Runs events (moving time forward) until none is left; returns how many ran.
    std::size_t run_until_idle(std::size_t max_events = 1'000'000);
    std::size_t pending() const;

private:
    bool run_one_due(sim_time limit);

    mutable std::mutex mutex_;
    sim_time now_{0};
    event_queue queue_;
};

}  // namespace calserve::device::sim
