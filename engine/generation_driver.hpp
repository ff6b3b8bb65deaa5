#pragma once
//! The drivers of the generation step machine (generation_controller.hpp): where its
//! steps run and what time it is.
//!
//! - runtime_driver: the deterministic runtime (a recordable daemon's driver thread,
//!   `calserve replay`, the soak). Steps are posted onto the runtime, commands run
//!   inline on the runtime's thread, time is the runtime's (virtual), so the same
//!   inputs at the same times take the same steps.
//! - worker_driver: the threaded daemon. One thread of its own runs every step in
//!   the order posted and, every `k_housekeeping_period` it is idle, a tick (the
//!   controller's housekeeping). Commands from other threads are posted to it;
//!   time is the steady clock.
//!
//! A step posted after `stop` (or after its host is gone) is dropped: posted steps
//! hold the driver by shared_ptr, never the controller.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace calserve::actors {
class runtime;
}  // namespace calserve::actors

namespace calserve::engine {

// How often the worker driver ticks while idle (also the slice in which a pause
// notices a stopping daemon).
inline constexpr auto k_housekeeping_period = std::chrono::milliseconds(20);

class generation_driver {
public:
    virtual ~generation_driver() = default;
    // Runs `step` later on the driver's thread.
    virtual void post(std::function<void()> step) = 0;
    // Runs a command's first step: inline when the caller is the driver's thread.
    virtual void enter(std::function<void()> step) = 0;
    virtual std::chrono::nanoseconds now() const = 0;
    // Waits `d` on the driver's thread (restore attempts); false if stopping.
    virtual bool pause(std::chrono::milliseconds d) = 0;
};

class runtime_driver final : public generation_driver {
public:
    explicit runtime_driver(actors::runtime& rt) : rt_(rt) {}
    void post(std::function<void()> step) override;
    void enter(std::function<void()> step) override { step(); }
    std::chrono::nanoseconds now() const override;
    bool pause(std::chrono::milliseconds) override { return true; }  // one attempt: nothing waits

private:
    actors::runtime& rt_;
};

class worker_driver final : public generation_driver {
public:
    worker_driver() = default;
    ~worker_driver() override { stop(); }
    // Starts the thread; `tick` runs on it whenever it has been idle for a period.
    void start(std::function<void()> tick);
    // Runs `last` on the thread, then ends it (idempotent).
    void stop(std::function<void()> last = {});
    void post(std::function<void()> step) override;
    void enter(std::function<void()> step) override { post(std::move(step)); }
    std::chrono::nanoseconds now() const override;
    bool pause(std::chrono::milliseconds d) override;

private:
    void run(std::function<void()> tick);

    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::function<void()>> steps_;
    std::function<void()> last_;
    bool stopping_ = false;
    std::thread thread_;
};

}  // namespace calserve::engine
