#pragma once
//! The actor runtime: one io_context, a clock, timers, the delivery hook.
//!
//! Two execution modes run the same actor code:
//!  - threaded: the io_context is run by N threads; each actor is serialised by
//!    its own strand; timers are real steady-clock timers.
//!  - deterministic: one thread (the caller) drives the io_context with
//!    `run_until_idle`; time is virtual and moves only in `advance_to_next_timer`
//!    / `run_for`; timers fire in (due time, creation order). With a single
//!    driver thread and FIFO handler queues every run of the same inputs
//!    delivers the same messages in the same order, so a seed or a trace
//!    reproduces a run exactly. A recordable daemon runs this mode in real time
//!    (realtime_driver.hpp: one thread keeps virtual time at the wall clock).
//!
//! Fault model: a handler that throws is reported (`report_failure`) and the
//! run goes on; in deterministic mode an instant that never ends (more than
//! `k_instant_limit` handlers without time moving) is a livelock: reported,
//! and nothing more runs, so a test fails instead of hanging.
//! Invariants: sequence numbers are strictly increasing in delivery order;
//! virtual time never goes backwards; a cancelled timer never fires.
#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace calserve::actors {

namespace asio = boost::asio;
using nanoseconds = std::chrono::nanoseconds;

enum class run_mode : std::uint8_t { threaded, deterministic };

struct actor_id {
    std::uint64_t value = 0;  // 0 = outside any actor (network, tests, timers)
    friend bool operator==(actor_id, actor_id) = default;
};

// What the delivery hook sees for every message handed to an actor.
struct delivery {
    std::uint64_t sequence = 0;
    nanoseconds time{0};
    actor_id from;
    actor_id to;
    std::string_view from_name;
    std::string_view to_name;
    std::string_view type;       // message type name
};
using delivery_hook = std::function<void(const delivery&)>;

// A pending timer; `cancel()` is thread-safe and idempotent. In threaded mode
// it also cancels the underlying Asio timer, so the timer and its callback (and
// whatever the callback holds, e.g. an actor's memory through a weak pointer)
// are released at once instead of when the timer would have expired.
class timer_handle {
public:
    timer_handle() = default;
    timer_handle(std::shared_ptr<std::atomic<bool>> cancelled, std::function<void()> release = {})
        : cancelled_(std::move(cancelled)), release_(std::move(release)) {}
    void cancel() {
        if (!cancelled_ || cancelled_->exchange(true)) return;
        if (release_) release_();
    }
    bool active() const { return cancelled_ && !cancelled_->load(); }

private:
    std::shared_ptr<std::atomic<bool>> cancelled_;
    std::function<void()> release_;
};

class runtime {
public:
    using strand_type = asio::strand<asio::io_context::executor_type>;

    explicit runtime(run_mode mode, std::size_t threads = 1);
    ~runtime();
    runtime(const runtime&) = delete;
    runtime& operator=(const runtime&) = delete;

    run_mode mode() const { return mode_; }
    asio::io_context& context() { return io_; }
    strand_type make_strand() { return asio::make_strand(io_); }

    // Time since the runtime started (virtual in deterministic mode).
    nanoseconds now() const;

    // Runs `fn` on `ex` after `delay` (virtual time in deterministic mode).
    timer_handle schedule_after(const asio::any_io_executor& ex, nanoseconds delay, std::function<void()> fn);

    // Threaded mode: start N threads running the io_context / stop and join them.
    void start();
    void stop();

    // Deterministic mode driving. run_until_idle runs every ready handler
    // (including those they post) without moving time; returns handlers run.
    // More than k_instant_limit handlers at one instant is a livelock: reported
    // as a failure, after which the deterministic runtime runs nothing more.
    std::size_t run_until_idle();
    // Moves virtual time to the earliest pending timer, fires every timer due
    // then, and runs until idle. Returns false when no timer is pending.
    bool advance_to_next_timer();
    // Advances virtual time by `duration`, firing timers in order.
    void run_for(nanoseconds duration);
    std::size_t pending_timers() const;
    // Due time of the earliest live timer (deterministic mode), if any.
    std::optional<nanoseconds> next_timer_due();

    // Delivery hook (set before actors start; called on the receiving strand).
    void set_delivery_hook(delivery_hook hook) { hook_ = std::move(hook); }
    const delivery_hook& hook() const { return hook_; }
    std::uint64_t next_sequence() { return sequence_.fetch_add(1, std::memory_order_relaxed) + 1; }

    // Actor registry: ids and names for tracing. An actor unregisters when it is
    // destroyed (a daemon spawns one per request); its id is never reused and
    // its name reads "?" afterwards.
    actor_id register_actor(std::string name);
    void unregister_actor(actor_id id);
    std::string name_of(actor_id id) const;

    // Failures (invariant violations escaping handlers). Tests and simulations
    // treat any entry as fatal; production logs and continues.
    void report_failure(std::string what);
    std::vector<std::string> failures() const;

    // Keeps an object alive as long as the runtime (spawned actors).
    void keep_alive(std::shared_ptr<void> object);
    void release(const void* object);

private:
    struct virtual_timer {
        nanoseconds due;
        std::uint64_t order;
        asio::any_io_executor ex;
        std::function<void()> fn;
        std::shared_ptr<std::atomic<bool>> cancelled;
    };
    struct later {
        bool operator()(const virtual_timer& a, const virtual_timer& b) const {
            return a.due != b.due ? a.due > b.due : a.order > b.order;
        }
    };

    static constexpr std::size_t k_instant_limit = 5'000'000;
    run_mode mode_;
    bool livelocked_ = false;  // deterministic only
    std::size_t thread_count_;
    asio::io_context io_;
    std::vector<std::thread> threads_;
    std::unique_ptr<asio::executor_work_guard<asio::io_context::executor_type>> work_;
    std::chrono::steady_clock::time_point started_;
    std::atomic<std::int64_t> virtual_now_ns_{0};
    std::priority_queue<virtual_timer, std::vector<virtual_timer>, later> timers_;  // deterministic only
    std::uint64_t timer_order_ = 0;
    std::shared_ptr<std::atomic<std::size_t>> cancelled_virtual_ = std::make_shared<std::atomic<std::size_t>>(0);
    void compact_timers_locked();  // drops cancelled virtual timers (mutex_ held)
    delivery_hook hook_;
    std::atomic<std::uint64_t> sequence_{0};

    mutable std::mutex mutex_;  // guards the fields below
    std::unordered_map<std::uint64_t, std::string> names_{{0, "external"}};
    std::uint64_t next_actor_id_ = 1;
    std::vector<std::string> failures_;
    std::unordered_map<const void*, std::shared_ptr<void>> kept_;
};

}  // namespace calserve::actors
