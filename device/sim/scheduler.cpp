// Real-time and manual schedulers of the simulator (see scheduler.hpp).
#include "device/sim/scheduler.hpp"

#include <algorithm>

namespace calserve::device::sim {

void event_queue::push(sim_time when, sim_callback fn) { heap_.push(event{when, next_seq_++, std::move(fn)}); }

sim_callback event_queue::pop() {
    sim_callback fn = std::move(heap_.top().fn);
    heap_.pop();
    return fn;
}

realtime_scheduler::realtime_scheduler()
    : epoch_(std::chrono::steady_clock::now()), thread_([this](std::stop_token st) { run(st); }) {}

realtime_scheduler::~realtime_scheduler() {
    thread_.request_stop();
    cv_.notify_all();
}

sim_time realtime_scheduler::now() const {
    return std::chrono::duration_cast<sim_time>(std::chrono::steady_clock::now() - epoch_);
}

void realtime_scheduler::call_at(sim_time when, sim_callback fn) {
    {
        std::lock_guard lock(mutex_);
        queue_.push(when, std::move(fn));
        ++generation_;
    }
    cv_.notify_all();
}

void realtime_scheduler::run(std::stop_token stop) {
    std::unique_lock lock(mutex_);
    while (!stop.stop_requested()) {
        if (queue_.empty()) {
            cv_.wait(lock, stop, [&] { return !queue_.empty(); });
            continue;
        }
        const auto due = epoch_ + queue_.next_time();
        if (std::chrono::steady_clock::now() < due) {
            const std::uint64_t seen = generation_;
            cv_.wait_until(lock, stop, due, [&] { return generation_ != seen; });
            continue;  // re-evaluate: an earlier event may have been pushed meanwhile
        }
        sim_callback fn = queue_.pop();
        lock.unlock();
        fn();
        lock.lock();
    }
}

sim_time manual_scheduler::now() const {
    std::lock_guard lock(mutex_);
    return now_;
}

void manual_scheduler::call_at(sim_time when, sim_callback fn) {
    std::lock_guard lock(mutex_);
    queue_.push(when, std::move(fn));
}

std::size_t manual_scheduler::pending() const {
    std::lock_guard lock(mutex_);
    return queue_.size();
}

bool manual_scheduler::run_one_due(sim_time limit) {
    sim_callback fn;
    {
        std::lock_guard lock(mutex_);
        if (queue_.empty() || queue_.next_time() > limit) return false;
        now_ = std::max(now_, queue_.next_time());
        fn = queue_.pop();
    }
    fn();  // outside the lock: callbacks schedule more events
    return true;
}

void manual_scheduler::advance_to(sim_time t) {
    while (run_one_due(t)) {
    }
    std::lock_guard lock(mutex_);
    now_ = std::max(now_, t);
}

std::size_t manual_scheduler::run_until_idle(std::size_t max_events) {
    std::size_t n = 0;
    while (n < max_events && run_one_due(sim_time::max())) ++n;
    return n;
}

bool manual_scheduler::drive_until(const std::function<bool()>& done, sim_time deadline) {
    while (!done()) {
        if (!run_one_due(deadline)) {
            std::lock_guard lock(mutex_);
            if (deadline != sim_time::max()) now_ = std::max(now_, deadline);  // "forever" never jumps the clock
            break;
        }
    }
    return true;
}

}  // namespace calserve::device::sim
