#include "actors/runtime/runtime.hpp"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "config/invariant.hpp"

namespace calserve::actors {

runtime::runtime(run_mode mode, std::size_t threads)
    : mode_(mode),
      thread_count_(mode == run_mode::deterministic ? 1 : std::max<std::size_t>(1, threads)),
      io_(mode == run_mode::deterministic ? 1 : int(thread_count_)),
      started_(std::chrono::steady_clock::now()) {}

runtime::~runtime() {
    stop();
    // Drop actors before the io_context so their handlers are destroyed first.
    std::unordered_map<const void*, std::shared_ptr<void>> kept;
    {
        std::lock_guard lock(mutex_);
        kept.swap(kept_);
    }
    kept.clear();
}

nanoseconds runtime::now() const {
    if (mode_ == run_mode::deterministic) return nanoseconds(virtual_now_ns_.load(std::memory_order_relaxed));
    return std::chrono::duration_cast<nanoseconds>(std::chrono::steady_clock::now() - started_);
}

timer_handle runtime::schedule_after(const asio::any_io_executor& ex, nanoseconds delay, std::function<void()> fn) {
    auto cancelled = std::make_shared<std::atomic<bool>>(false);
    if (delay < nanoseconds::zero()) delay = nanoseconds::zero();
    if (mode_ == run_mode::deterministic) {
        std::lock_guard lock(mutex_);
        // Cancelled timers wait in the heap until they come due; a long-lived run
        // (a recordable daemon: a 600 s request deadline per request) would hold
        // them all, so the heap is compacted once most of it is cancelled.
        if (auto n = cancelled_virtual_->load(); n > 1024 && n * 2 > timers_.size()) compact_timers_locked();
        timers_.push(virtual_timer{now() + delay, timer_order_++, ex, std::move(fn), cancelled});
        return timer_handle(cancelled, [counter = cancelled_virtual_] { counter->fetch_add(1); });
    }
    auto timer = std::make_shared<asio::steady_timer>(ex, delay);
    timer->async_wait([timer, cancelled, fn = std::move(fn)](boost::system::error_code ec) {
        if (!ec && !cancelled->load()) fn();
    });
    // steady_timer is not thread-safe: the cancel runs on the timer's executor.
    std::weak_ptr<asio::steady_timer> weak = timer;
    return timer_handle(cancelled, [weak, ex] {
        asio::post(ex, [weak] {
            if (auto t = weak.lock()) t->cancel();
        });
    });
}

void runtime::start() {
    CALSERVE_INVARIANT(mode_ == run_mode::threaded, "start() is for threaded mode");
    if (!threads_.empty()) return;
    work_ = std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(io_.get_executor());
    for (std::size_t i = 0; i < thread_count_; ++i) threads_.emplace_back([this] { io_.run(); });
}

void runtime::stop() {
    if (work_) work_.reset();
    io_.stop();
    for (auto& t : threads_)
        if (t.joinable()) t.join();
    threads_.clear();
}

std::size_t runtime::run_until_idle() {
    CALSERVE_INVARIANT(mode_ == run_mode::deterministic, "run_until_idle() is for deterministic mode");
    std::size_t ran = 0;
    while (!livelocked_) {
        if (io_.stopped()) io_.restart();
        if (io_.poll_one() == 0) break;
        if (++ran == k_instant_limit) {
            // Handlers posting handlers without end while time stands still: nothing a
            // timer could ever interrupt. Reported, and the run stops here for good.
            livelocked_ = true;
            report_failure("livelock: " + std::to_string(ran) + " handlers at t=" + std::to_string(now().count()) +
                           " ns without time moving");
        }
    }
    return ran;
}

bool runtime::advance_to_next_timer() {
    CALSERVE_INVARIANT(mode_ == run_mode::deterministic, "advance_to_next_timer() is for deterministic mode");
    run_until_idle();
    if (livelocked_) return false;
    std::vector<virtual_timer> due;
    {
        std::lock_guard lock(mutex_);
        while (!timers_.empty() && timers_.top().cancelled->load()) timers_.pop();
        if (timers_.empty()) return false;
        nanoseconds t = timers_.top().due;
        if (t > now()) virtual_now_ns_.store(t.count(), std::memory_order_relaxed);
        while (!timers_.empty() && timers_.top().due <= now()) {
            due.push_back(timers_.top());
            timers_.pop();
        }
    }
    for (auto& timer : due) {
        asio::post(timer.ex, [cancelled = timer.cancelled, fn = std::move(timer.fn)] {
            if (!cancelled->load()) fn();
        });
    }
    run_until_idle();
    return true;
}

void runtime::run_for(nanoseconds duration) {
    nanoseconds until = now() + duration;
    run_until_idle();
    while (!livelocked_) {
        {
            std::lock_guard lock(mutex_);
            while (!timers_.empty() && timers_.top().cancelled->load()) timers_.pop();
            if (timers_.empty() || timers_.top().due > until) break;
        }
        advance_to_next_timer();
    }
    if (now() < until) virtual_now_ns_.store(until.count(), std::memory_order_relaxed);
    run_until_idle();
}

void runtime::compact_timers_locked() {
    std::vector<virtual_timer> live;
    live.reserve(timers_.size());
    while (!timers_.empty()) {
        if (!timers_.top().cancelled->load()) live.push_back(timers_.top());
        timers_.pop();
    }
    timers_ = decltype(timers_)(later{}, std::move(live));  // (due, order) keys unchanged: same firing order
    cancelled_virtual_->store(0);
}

std::optional<nanoseconds> runtime::next_timer_due() {
    std::lock_guard lock(mutex_);
    while (!timers_.empty() && timers_.top().cancelled->load()) timers_.pop();
    if (timers_.empty()) return std::nullopt;
    return timers_.top().due;
}

std::size_t runtime::pending_timers() const {
    std::lock_guard lock(mutex_);
    return timers_.size();
}

actor_id runtime::register_actor(std::string name) {
    std::lock_guard lock(mutex_);
    actor_id id{next_actor_id_++};
    names_.emplace(id.value, std::move(name));
    return id;
}

void runtime::unregister_actor(actor_id id) {
    if (id.value == 0) return;
    std::lock_guard lock(mutex_);
    names_.erase(id.value);
}

std::string runtime::name_of(actor_id id) const {
    std::lock_guard lock(mutex_);
    auto it = names_.find(id.value);
    return it != names_.end() ? it->second : std::string("?");
}

void runtime::report_failure(std::string what) {
    spdlog::error("actor failure: {}", what);
    std::lock_guard lock(mutex_);
    failures_.push_back(std::move(what));
}

std::vector<std::string> runtime::failures() const {
    std::lock_guard lock(mutex_);
    return failures_;
}

void runtime::keep_alive(std::shared_ptr<void> object) {
    std::lock_guard lock(mutex_);
    const void* key = object.get();
    kept_.emplace(key, std::move(object));
}

void runtime::release(const void* object) {
    std::shared_ptr<void> dropped;  // destroyed after the lock is released
    std::lock_guard lock(mutex_);
    if (auto it = kept_.find(object); it != kept_.end()) {
        dropped = std::move(it->second);
        kept_.erase(it);
    }
}

}  // namespace calserve::actors
