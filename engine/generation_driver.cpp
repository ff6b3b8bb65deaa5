// The drivers of the generation step machine (generation_driver.hpp).
#include "engine/generation_driver.hpp"

#include "actors/runtime/runtime.hpp"

namespace calserve::engine {

void runtime_driver::post(std::function<void()> step) { boost::asio::post(rt_.context(), std::move(step)); }

std::chrono::nanoseconds runtime_driver::now() const { return rt_.now(); }

void worker_driver::start(std::function<void()> tick) {
    thread_ = std::thread([this, tick = std::move(tick)] { run(tick); });
}

void worker_driver::stop(std::function<void()> last) {
    {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
        stopping_ = true;
        last_ = std::move(last);
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void worker_driver::post(std::function<void()> step) {
    {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
        steps_.push_back(std::move(step));
    }
    wake_.notify_all();
}

std::chrono::nanoseconds worker_driver::now() const { return std::chrono::steady_clock::now().time_since_epoch(); }

bool worker_driver::pause(std::chrono::milliseconds d) {
    const auto until = std::chrono::steady_clock::now() + d;
    std::unique_lock lock(mutex_);
    while (!stopping_ && std::chrono::steady_clock::now() < until) wake_.wait_for(lock, k_housekeeping_period);
    return !stopping_;
}

void worker_driver::run(std::function<void()> tick) {
    auto next_tick = std::chrono::steady_clock::now() + k_housekeeping_period;
    std::unique_lock lock(mutex_);
    while (!stopping_) {
        wake_.wait_until(lock, next_tick, [&] { return stopping_ || !steps_.empty(); });
        while (!stopping_ && !steps_.empty()) {
            auto step = std::move(steps_.front());
            steps_.pop_front();
            lock.unlock();
            step();
            lock.lock();
        }
        if (stopping_) break;
        if (std::chrono::steady_clock::now() >= next_tick) {
            lock.unlock();
            tick();
            lock.lock();
            next_tick = std::chrono::steady_clock::now() + k_housekeeping_period;
        }
    }
    auto dropped = std::move(steps_);  // destroyed outside the lock
    auto last = std::move(last_);
    lock.unlock();
    if (last) last();
}

}  // namespace calserve::engine
