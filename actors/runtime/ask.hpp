#pragma once
//! `ask`: request/response over messages, as an awaitable with a timeout.
//! The caller builds the message around a `reply_to<R>`; the first of {reply,
//! timeout, refused tell} completes the awaitable, later ones are ignored.
//! The timeout runs on the runtime's clock (virtual in deterministic mode).
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <optional>

#include "actors/runtime/actor.hpp"
#include "config/result.hpp"

namespace calserve::actors {

// Callable a handler invokes (once) with its answer. Copyable, thread-safe.
template <class R>
using reply_to = std::function<void(R)>;

template <class R, class A, class MakeMessage>
boost::asio::awaitable<result<R>> ask(const address<A>& to, MakeMessage make, nanoseconds timeout,
                                      actor_id from = {}) {
    auto target = to.lock();
    if (!target) co_return make_error(status::not_ready, "ask: actor stopped");
    runtime& rt = target->rt();
    auto ex = co_await boost::asio::this_coro::executor;
    co_return co_await boost::asio::async_initiate<const boost::asio::use_awaitable_t<>&, void(result<R>)>(
        [&](auto handler) {
            using handler_type = decltype(handler);
            struct state {
                std::atomic<bool> done{false};
                std::optional<handler_type> handler;
                timer_handle timer;
            };
            auto st = std::make_shared<state>();
            st->handler.emplace(std::move(handler));
            auto complete = [st](result<R> r) {
                if (st->done.exchange(true)) return;
                st->timer.cancel();
                auto h = std::move(*st->handler);
                st->handler.reset();
                auto hex = boost::asio::get_associated_executor(h);
                boost::asio::post(hex, [h = std::move(h), r = std::move(r)]() mutable { std::move(h)(std::move(r)); });
            };
            st->timer = rt.schedule_after(ex, timeout, [complete] {
                complete(make_error(status::deadline_exceeded, "ask timed out"));
            });
            auto told = to.tell(make(reply_to<R>(complete)), from);
            if (told != tell_status::accepted)
                complete(make_error(told == tell_status::overloaded ? status::mailbox_full : status::not_ready,
                                    "ask: message refused"));
        },
        boost::asio::use_awaitable);
}

}  // namespace calserve::actors
