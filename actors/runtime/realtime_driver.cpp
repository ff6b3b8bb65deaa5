#include "actors/runtime/realtime_driver.hpp"

#include "config/invariant.hpp"

namespace calserve::actors {

realtime_driver::realtime_driver(runtime& rt) : rt_(rt) {
    CALSERVE_INVARIANT(rt.mode() == run_mode::deterministic, "realtime_driver needs a deterministic runtime");
}

realtime_driver::~realtime_driver() { stop(); }

void realtime_driver::start() {
    std::lock_guard lock(mutex_);
    if (thread_.joinable()) return;
    accepting_ = true;
    epoch_ = std::chrono::steady_clock::now();
    base_ = rt_.now();
    thread_ = std::jthread([this](std::stop_token stop) {
        driver_id_.store(std::this_thread::get_id());
        run(stop);
    });
}

void realtime_driver::stop() {
    if (thread_.joinable()) {
        thread_.request_stop();
        wake_.notify_all();
        thread_.join();
    }
    // The loop drained the inbox under the lock when it saw the stop; nothing can be left behind.
    driver_id_.store({});
}

bool realtime_driver::enqueue(std::function<void()> fn) {
    {
        std::lock_guard lock(mutex_);
        if (!accepting_) return false;
        inbox_.push_back(std::move(fn));
    }
    wake_.notify_one();
    return true;
}

void realtime_driver::post(std::function<void()> fn) {
    if (!enqueue(fn)) {
        std::lock_guard lock(stopped_mutex_);
        fn();
    }
}

void realtime_driver::run_item(std::function<void()>& fn) {
    try {
        fn();
    } catch (const std::exception& e) {
        rt_.report_failure(std::string("driver: ") + e.what());
    }
    rt_.run_until_idle();
}

void realtime_driver::run(std::stop_token stop) {
    std::vector<std::function<void()>> batch;
    auto inbox_waiting = [this] {
        std::lock_guard lock(mutex_);
        return !inbox_.empty();
    };
    // Work from another thread is applied at the wall clock's instant when no timer is
    // due before it: the clock alone moves, so the work's time stamp (a trace input's
    // `t`) is when it arrived, not the instant the loop last looked. With a timer
    // overdue (virtual time lagging) the work runs at the current instant, as before.
    auto catch_up = [this] {
        const auto wall = base_ + std::chrono::duration_cast<nanoseconds>(std::chrono::steady_clock::now() - epoch_);
        const auto due = rt_.next_timer_due();
        if (wall > rt_.now() && (!due || *due > wall)) rt_.run_for(wall - rt_.now());
    };
    while (true) {
        const auto wall = base_ + std::chrono::duration_cast<nanoseconds>(std::chrono::steady_clock::now() - epoch_);
        rt_.run_until_idle();
        // Catch up with the wall clock one timer instant at a time, so work from
        // other threads waits at most one instant's handlers, not the whole
        // backlog (when the device's host-side compute runs slower than its
        // modelled time, virtual time lags and the backlog never ends).
        bool interrupted = false;
        while (auto due = rt_.next_timer_due()) {
            if (*due > wall) break;
            rt_.advance_to_next_timer();
            if ((interrupted = inbox_waiting())) break;
        }
        if (interrupted)
            rt_.run_for(nanoseconds(0));  // what replay does first: every timer due at this instant fires
        else if (wall > rt_.now())
            rt_.run_for(wall - rt_.now());  // no timer is due before `wall`: only the clock moves
        bool stopping = stop.stop_requested();
        {
            std::lock_guard lock(mutex_);
            if (stopping) accepting_ = false;  // the last batch: later work runs on its caller's thread
            batch.swap(inbox_);
        }
        if (stopping) {  // callers that found the inbox closed run their work under the same lock
            std::lock_guard lock(stopped_mutex_);
            for (auto& fn : batch) run_item(fn);
            return;
        }
        for (auto& fn : batch) {
            catch_up();
            run_item(fn);
        }
        if (!batch.empty() || interrupted) {
            batch.clear();
            continue;
        }
        auto due = rt_.next_timer_due();
        std::unique_lock lock(mutex_);
        auto ready = [this] { return !inbox_.empty(); };
        if (due)
            wake_.wait_until(lock, stop, epoch_ + (*due - base_), ready);
        else
            wake_.wait(lock, stop, ready);
    }
}

}  // namespace calserve::actors
