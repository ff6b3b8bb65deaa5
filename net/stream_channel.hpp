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
//! A byte bound (WebSocket: server.ws_write_queue_bytes) covers everything queued
//! for the consumer: an event's bytes count from its push until the consumer
//! reports them written (`release`), so events taken but not yet written still
//! count. A token that would pass it overflows its stream like one over the event
//! limit; finish events and control replies are always queued, and the consumer
//! stops reading client messages while the bound is reached (`wait_room`), which
//! bounds the replies: at most one client message's replies and one finish per
//! stream beyond the bound.
//!
//! Shutdown (`shutdown`): the server is stopping; the consumer is woken and ends
//! its streams with a last error event instead of a bare close.
//!
//! Invariants: queued token events <= limit; queued bytes <= byte limit + the
//! bypassing events above; a wake-up is posted at most once per wait.
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
#include "metrics/metrics.hpp"

namespace calserve::net {

using steady_clock = std::chrono::steady_clock;

// body: a token, the finish, or a pre-rendered control message (WebSocket replies).
struct stream_event {
    std::uint64_t stream = 0;
    std::variant<actors::generated_token, actors::generation_result, std::string> body;
    steady_clock::time_point at;
    std::size_t bytes = 0;   // what it counts against the byte bound (set by push)
    bool is_token() const { return body.index() == 0; }
};

// Wire bytes an event is charged: its text plus the JSON around it.
std::size_t event_bytes(const stream_event& ev);

class stream_channel : public std::enable_shared_from_this<stream_channel> {
public:
    // `strand` is the consumer's executor; `limit` bounds queued token events;
    // `limit_bytes` (0 = none) bounds queued bytes until released; `bytes_gauge`
    // (optional) mirrors the queued bytes (summed over channels).
    stream_channel(boost::asio::any_io_executor strand, std::size_t limit, std::size_t limit_bytes = 0,
                   metrics::gauge* bytes_gauge = nullptr);
    ~stream_channel();

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
    // Drops the queued events of one stream that the consumer has not taken yet (a
    // WebSocket `started` queued before a submit that then failed).
    void discard(std::uint64_t stream);
    // Consumer, on the strand: `bytes` of taken events are written (or dropped).
    void release(std::size_t bytes);
    // Consumer, on the strand: waits until the queued bytes are under the byte bound.
    boost::asio::awaitable<void> wait_room();
    std::size_t queued_bytes() const;
    // Any thread: the server is stopping; wakes the consumer. Idempotent.
    void shutdown();
    bool shutting_down() const;

private:
    boost::asio::any_io_executor strand_;
    boost::asio::steady_timer timer_;     // used only on the strand, as a condition variable
    boost::asio::steady_timer room_timer_;  // the same, for wait_room (woken by release)
    const std::size_t limit_;
    const std::size_t limit_bytes_;       // 0 = no byte bound (and no byte accounting)
    metrics::gauge* bytes_gauge_;
    mutable std::mutex mutex_;
    std::deque<stream_event> queue_;      // guarded by mutex_
    std::size_t queued_tokens_ = 0;       // guarded; <= limit_
    std::set<std::uint64_t> muted_;       // guarded; overflowed or muted streams: tokens dropped
    std::vector<std::uint64_t> overflowed_;  // guarded; reported once by take()
    std::size_t queued_bytes_ = 0;        // guarded; pushed and not yet released
    bool waiting_ = false;                // guarded; the consumer is parked on timer_
    bool room_waiting_ = false;           // strand only; the reader is parked on room_timer_
    bool closed_ = false;                 // guarded
    bool shutdown_ = false;               // guarded
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
