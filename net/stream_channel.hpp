#pragma once
//! The bridge from engine threads to a connection's strand. The engine calls a
//! `generation_sink` from arbitrary runtime threads and must never block, so the
//! sink only appends to a bounded, mutex-guarded queue and, if the connection's
//! coroutine is waiting, posts a wake-up onto the connection's strand.
//!
//! One channel per consumer: an SSE/JSON response (one stream) or a WebSocket
//! (many streams, told apart by `stream` key).
//!
//! Fault model: a consumer slower than the engine fills the queue. Then the
//! token that does not fit marks its stream *overflowed*; its later tokens are
//! dropped, and the consumer (on its strand) cancels that request and reports an
//! error. Finish events are never dropped (the engine sends exactly one per
//! request), so every stream still ends exactly once. A consumer that has gone
//! (`close`) makes every later push a no-op.
//!
//! Invariants: queued token events <= limit; finish events bypass the limit
//! (at most one per stream), as do control messages (at most one per client
//! message read); a wake-up is posted at most once per wait.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <variant>
#include <vector>

#include "actors/engine.hpp"

namespace calserve::net {

using steady_clock = std::chrono::steady_clock;

// body: a token, the finish, or a pre-rendered control message (WebSocket replies).
struct stream_event {
    std::uint64_t stream = 0;
    std::variant<actors::generated_token, actors::generation_result, std::string> body;
    steady_clock::time_point at;
    bool is_token() const { return body.index() == 0; }
};

class stream_channel : public std::enable_shared_from_this<stream_channel> {
public:
    // `strand` is the consumer's executor; `limit` bounds queued token events.
    stream_channel(boost::asio::any_io_executor strand, std::size_t limit);

    // Producer side, any thread, never blocks.
    void push(stream_event ev);
    // Consumer side, on the strand: waits until an event or an overflow is pending.
    boost::asio::awaitable<void> wait();
    // Takes every queued event (in push order) and the streams that overflowed since the last call.
    void take(std::vector<stream_event>& events, std::vector<std::uint64_t>& overflowed);
    // The consumer is gone: drop everything from now on.
    void close();
    // Starts dropping one stream's tokens (a cancelled WebSocket stream); its finish still arrives.
    void mute(std::uint64_t stream);

private:
    boost::asio::any_io_executor strand_;
    boost::asio::steady_timer timer_;     // used only on the strand, as a condition variable
    const std::size_t limit_;
    std::mutex mutex_;
    std::deque<stream_event> queue_;      // guarded by mutex_
    std::size_t queued_tokens_ = 0;       // guarded; <= limit_
    std::set<std::uint64_t> muted_;       // guarded; overflowed or muted streams: tokens dropped
    std::vector<std::uint64_t> overflowed_;  // guarded; reported once by take()
    bool waiting_ = false;                // guarded; the consumer is parked on timer_
    bool closed_ = false;                 // guarded
};

// A generation_sink that feeds one stream of a channel.
class channel_sink final : public actors::generation_sink {
public:
    channel_sink(std::shared_ptr<stream_channel> channel, std::uint64_t stream)
        : channel_(std::move(channel)), stream_(stream) {}
    void on_token(const actors::generated_token& token) override;
    void on_finish(const actors::generation_result& result) override;

private:
    std::shared_ptr<stream_channel> channel_;
    std::uint64_t stream_;
};

}  // namespace calserve::net
