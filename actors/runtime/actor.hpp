#pragma once
//! Actor = private state + a strand + one entry point taking its message variant.
//!
//! A concrete actor derives from `actor<Self, Message>` where `Message` is the
//! `std::variant` of every message it accepts (declared in `<name>_messages.hpp`),
//! and implements `void on_message(Message&)` (usually a visit into `on_<event>`
//! handlers). Others hold an `address<Self>` and `tell` it messages from any
//! thread. Delivery runs on the actor's strand, so handlers of one actor never
//! run concurrently and messages from one sender arrive in send order.
//!
//! Mailbox: bounded by `k_mailbox_capacity` (or the constructor's value);
//! `tell` on a full mailbox returns `tell_status::overloaded` at once and never
//! blocks. Every delivery passes the runtime's hook exactly once (sequence,
//! time, from, to, type). A handler that throws (an invariant violation) is
//! caught here: the failure is reported to the runtime and the actor lives on.
#include <atomic>
#include <boost/asio/post.hpp>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include "actors/runtime/message_name.hpp"
#include "actors/runtime/runtime.hpp"

namespace calserve::actors {

inline constexpr std::size_t k_mailbox_capacity = 4096;

enum class tell_status : std::uint8_t { accepted, overloaded, stopped };

template <class Self, class Message>
class actor : public std::enable_shared_from_this<Self> {
public:
    using message_type = Message;

    actor(runtime& rt, std::string name, std::size_t mailbox_capacity = k_mailbox_capacity)
        : rt_(rt), strand_(rt.make_strand()), name_(std::move(name)), id_(rt.register_actor(name_)),
          capacity_(mailbox_capacity) {}
    virtual ~actor() { rt_.unregister_actor(id_); }

    actor_id id() const { return id_; }
    const std::string& name() const { return name_; }
    runtime& rt() const { return rt_; }
    runtime::strand_type& strand() { return strand_; }
    std::size_t mailbox_size() const { return queued_.load(std::memory_order_relaxed); }
    std::size_t mailbox_capacity() const { return capacity_; }
    std::uint64_t delivered() const { return delivered_.load(std::memory_order_relaxed); }

    // Thread-safe. Enqueues onto the strand unless the mailbox is full.
    tell_status enqueue(Message msg, actor_id from) {
        if (stopped_.load(std::memory_order_acquire)) return tell_status::stopped;
        if (queued_.fetch_add(1, std::memory_order_acq_rel) >= capacity_) {
            queued_.fetch_sub(1, std::memory_order_acq_rel);
            return tell_status::overloaded;
        }
        boost::asio::post(strand_, [self = this->shared_from_this(), msg = std::move(msg), from]() mutable {
            self->deliver(msg, from);
        });
        return tell_status::accepted;
    }

    // Stops accepting messages; queued ones are dropped on delivery.
    void stop() { stopped_.store(true, std::memory_order_release); }
    bool stopped() const { return stopped_.load(std::memory_order_acquire); }

protected:
    // Runs `fn` on this actor's strand after `delay` (virtual time in deterministic mode).
    timer_handle start_timer(nanoseconds delay, std::function<void()> fn) {
        return rt_.schedule_after(strand_, delay,
                                  [weak = this->weak_from_this(), fn = std::move(fn)] {
                                      if (auto self = weak.lock(); self && !self->stopped()) fn();
                                  });
    }
    // Runs `fn` on this actor's strand as soon as possible (no hook, no mailbox slot).
    void post_self(std::function<void()> fn) {
        boost::asio::post(strand_, [weak = this->weak_from_this(), fn = std::move(fn)] {
            if (auto self = weak.lock(); self && !self->stopped()) fn();
        });
    }

private:
    void deliver(Message& msg, actor_id from) {
        queued_.fetch_sub(1, std::memory_order_acq_rel);
        if (stopped()) return;
        delivered_.fetch_add(1, std::memory_order_relaxed);
        if (const auto& hook = rt_.hook()) {
            std::string_view type = std::visit([](const auto& m) { return message_name<std::decay_t<decltype(m)>>(); }, msg);
            const std::string from_name = rt_.name_of(from);
            hook(delivery{rt_.next_sequence(), rt_.now(), from, id_, from_name, name_, type});
        }
        try {
            static_cast<Self*>(this)->on_message(msg);
        } catch (const std::exception& e) {
            rt_.report_failure(name_ + ": " + e.what());
        }
    }

    runtime& rt_;
    runtime::strand_type strand_;
    std::string name_;
    actor_id id_;
    std::size_t capacity_;
    std::atomic<std::size_t> queued_{0};
    std::atomic<std::uint64_t> delivered_{0};
    std::atomic<bool> stopped_{false};
};

// A handle to an actor; cheap to copy; `tell` from any thread. Holds a weak
// reference: telling an actor that is gone answers `stopped`.
template <class A>
class address {
public:
    address() = default;
    explicit address(const std::shared_ptr<A>& target) : target_(target), id_(target->id()) {}

    // A template so that address<A> works with A still incomplete (actors name each other).
    template <class Message>
    tell_status tell(Message&& msg, actor_id from = {}) const {
        if (auto t = target_.lock()) return t->enqueue(typename A::message_type(std::forward<Message>(msg)), from);
        return tell_status::stopped;
    }
    actor_id id() const { return id_; }
    bool valid() const { return !target_.expired(); }
    std::shared_ptr<A> lock() const { return target_.lock(); }

private:
    std::weak_ptr<A> target_;
    actor_id id_;
};

// Creates an actor owned by the runtime (kept alive until `despawn` or runtime end).
template <class A, class... Args>
address<A> spawn(runtime& rt, Args&&... args) {
    auto a = std::make_shared<A>(rt, std::forward<Args>(args)...);
    rt.keep_alive(a);
    return address<A>(a);
}

template <class A>
void despawn(runtime& rt, const address<A>& addr) {
    if (auto a = addr.lock()) {
        a->stop();
        rt.release(a.get());
    }
}

}  // namespace calserve::actors
