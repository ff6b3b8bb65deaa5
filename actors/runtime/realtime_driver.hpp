#pragma once
//! realtime_driver: runs a deterministic runtime in real time on one thread,
//! so a live daemon's run is reproducible from its inputs alone.
//!
//! The runtime stays in deterministic mode (virtual clock, one thread, FIFO
//! handler queues). The driver thread keeps virtual time caught up with the
//! wall clock (firing timers at their due times, one instant at a time), then
//! applies the work other threads handed it (`post` / `call`: submits, cancels,
//! control commands) one item at a time at the current virtual time, running
//! until idle after each — exactly what a replay does with a trace's inputs
//! (`soak::simulation::apply`). Every nondeterministic event therefore enters
//! the actors through this inbox, stamped with a virtual time, and a recorder
//! on the inbox (traced_engine) captures a run completely.
//!
//! Fault model: work that throws is reported as a runtime failure and the loop
//! goes on. After `stop`, `post`/`call` run the work on the caller's thread
//! under the driver's lock (shutdown only: actors no longer run concurrently).
//! Invariants: one thread touches the runtime; virtual time never runs ahead of
//! the wall clock; inbox items run in arrival order.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "actors/runtime/runtime.hpp"

namespace calserve::actors {

class realtime_driver {
public:
    explicit realtime_driver(runtime& rt);
    ~realtime_driver();
    realtime_driver(const realtime_driver&) = delete;
    realtime_driver& operator=(const realtime_driver&) = delete;

    void start();
    // Runs what is queued, then joins the driver thread. Idempotent.
    void stop();

    // Thread-safe: runs `fn` on the driver thread at the next loop turn.
    void post(std::function<void()> fn);

    // Runs `fn` on the driver thread and waits for its result (inline when
    // already on the driver thread, or once the driver has stopped).
    template <class F>
    std::invoke_result_t<F> call(F fn) {
        using R = std::invoke_result_t<F>;
        if (on_driver_thread()) return fn();
        std::packaged_task<R()> task(std::move(fn));
        auto done = task.get_future();
        if (!enqueue([&task] { task(); })) {
            std::lock_guard lock(stopped_mutex_);
            task();
        }
        return done.get();
    }

    bool on_driver_thread() const { return std::this_thread::get_id() == driver_id_.load(); }
    runtime& rt() { return rt_; }
    // The steady-clock instant virtual time `t` stands for (the driver keeps virtual time
    // at or behind the wall clock by this mapping). Set by start(); driver thread.
    std::chrono::steady_clock::time_point wall_time_of(nanoseconds t) const { return epoch_ + (t - base_); }

private:
    bool enqueue(std::function<void()> fn);  // false once stopped
    void run(std::stop_token stop);
    void run_item(std::function<void()>& fn);

    runtime& rt_;
    std::mutex mutex_;
    std::condition_variable_any wake_;
    std::vector<std::function<void()>> inbox_;  // guarded by mutex_
    bool accepting_ = false;                    // guarded by mutex_
    std::mutex stopped_mutex_;                  // serialises work run after stop
    std::chrono::steady_clock::time_point epoch_;
    nanoseconds base_{0};
    std::atomic<std::thread::id> driver_id_{};
    std::jthread thread_;
};

}  // namespace calserve::actors
