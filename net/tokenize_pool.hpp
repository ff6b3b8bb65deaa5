#pragma once
//! tokenize_pool: the prompt work of a generation request (chat template,
//! tokenizer, context checks) runs on a few threads of its own, never on the
//! network threads. A 1 MB prompt takes the tokenizer a noticeable time; on the
//! event loop it held up /health, /ready and every other connection's token
//! writes on that thread for as long.
//!
//! Fault model: the queue is bounded (`queue_bound` waiting + one running per
//! thread); a full pool refuses at once (`run` answers nullopt, the caller
//! replies 429 overloaded with Retry-After) instead of queueing without bound.
//! A job never throws (the work returns its error as a value).
//!
//! Invariants: threads are fixed at construction and named "cs-tokenize";
//! the awaiting coroutine resumes on its own executor (its connection's strand)
//! with the job's result; `queued()` counts jobs accepted and not yet finished.
//! Lifetime: the destructor stops and joins the threads; jobs not yet run are
//! dropped with their handlers (only at shutdown, after the server stopped).
#include <atomic>
#include <boost/asio/async_result.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstddef>
#include <optional>
#include <thread>
#include <vector>

#include "metrics/metrics.hpp"

namespace calserve::net {

class tokenize_pool {
public:
    // `metrics` may be null; otherwise tokenize_jobs and tokenize_queue are kept.
    tokenize_pool(std::size_t threads, std::size_t queue_bound, metrics::calserve_metrics* metrics);
    ~tokenize_pool();
    tokenize_pool(const tokenize_pool&) = delete;
    tokenize_pool& operator=(const tokenize_pool&) = delete;

    // Runs `fn()` on a pool thread and resumes the caller with its result, or
    // nullopt at once when the pool is full.
    template <class R, class F>
    boost::asio::awaitable<std::optional<R>> run(F fn) {
        namespace asio = boost::asio;
        if (!try_enter()) co_return std::nullopt;
        R out = co_await asio::async_initiate<const asio::use_awaitable_t<>&, void(R)>(
            [this, fn = std::move(fn)](auto handler) mutable {
                auto home = asio::get_associated_executor(handler);
                asio::post(io_, [this, fn = std::move(fn), handler = std::move(handler), home]() mutable {
                    R result = fn();
                    leave();
                    asio::post(home, [handler = std::move(handler), result = std::move(result)]() mutable {
                        std::move(handler)(std::move(result));
                    });
                });
            },
            asio::use_awaitable);
        co_return std::optional<R>(std::move(out));
    }

    std::size_t queued() const { return queued_.load(); }
    std::size_t capacity() const { return capacity_; }

private:
    bool try_enter();
    void leave();

    boost::asio::io_context io_;
    std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
    std::vector<std::thread> threads_;
    const std::size_t capacity_;        // waiting + running jobs accepted at most
    std::atomic<std::size_t> queued_{0};
    metrics::calserve_metrics* metrics_;
};

}  // namespace calserve::net
