// Engine thread -> strand event queue. See stream_channel.hpp.
#include "net/stream_channel.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace calserve::net {
namespace asio = boost::asio;

namespace {
// JSON around a token's text in a delta message (type, id, token, logprob).
constexpr std::size_t k_token_overhead_bytes = 96;
// JSON of a done/error message around a finish's held-back text.
constexpr std::size_t k_finish_overhead_bytes = 320;
}  // namespace

std::size_t event_bytes(const stream_event& ev) {
    if (auto* t = std::get_if<actors::generated_token>(&ev.body)) return t->text.size() + k_token_overhead_bytes;
    if (auto* r = std::get_if<actors::generation_result>(&ev.body)) return r->tail_text.size() + k_finish_overhead_bytes;
    return std::get<std::string>(ev.body).size();
}

stream_channel::stream_channel(asio::any_io_executor strand, std::size_t limit, std::size_t limit_bytes,
                               metrics::gauge* bytes_gauge)
    : strand_(strand),
      timer_(strand),
      room_timer_(strand),
      limit_(limit == 0 ? 1 : limit),
      limit_bytes_(limit_bytes),
      bytes_gauge_(limit_bytes == 0 ? nullptr : bytes_gauge) {}

stream_channel::~stream_channel() { close(); }

void stream_channel::push(stream_event ev) {
    bool wake = false;
    {
        std::lock_guard lock(mutex_);
        if (closed_) return;
        if (limit_bytes_ > 0) ev.bytes = event_bytes(ev);
        bool queue_it = true;
        if (ev.is_token()) {
            if (muted_.contains(ev.stream)) return;
            const bool over_bytes = limit_bytes_ > 0 && queued_bytes_ + ev.bytes > limit_bytes_;
            if (queued_tokens_ >= limit_ || over_bytes) {
                muted_.insert(ev.stream);
                overflowed_.push_back(ev.stream);
                queue_it = false;
            } else {
                ++queued_tokens_;
            }
        } else if (ev.body.index() == 1) {
            muted_.erase(ev.stream);
        }
        if (queue_it) {
            queued_bytes_ += ev.bytes;
            if (bytes_gauge_) bytes_gauge_->add(double(ev.bytes));
            queue_.push_back(std::move(ev));
        }
        wake = waiting_;
        waiting_ = false;
    }
    // The wait was armed in the same strand step that set waiting_, so this cancel
    // always lands after the timer wait started.
    if (wake) asio::post(strand_, [self = shared_from_this()] { self->timer_.cancel(); });
}

asio::awaitable<void> stream_channel::wait() {
    {
        std::lock_guard lock(mutex_);
        if (!queue_.empty() || !overflowed_.empty() || closed_ || shutdown_) co_return;
        waiting_ = true;
    }
    timer_.expires_at(steady_clock::time_point::max());
    auto [ec] = co_await timer_.async_wait(asio::as_tuple(asio::use_awaitable));
    (void)ec;  // operation_aborted is the normal wake-up
}

void stream_channel::take(std::vector<stream_event>& events, std::vector<std::uint64_t>& overflowed) {
    std::lock_guard lock(mutex_);
    events.insert(events.end(), std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
    queue_.clear();
    queued_tokens_ = 0;
    overflowed.insert(overflowed.end(), overflowed_.begin(), overflowed_.end());
    overflowed_.clear();
}

void stream_channel::close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    queue_.clear();
    queued_tokens_ = 0;
    if (bytes_gauge_) bytes_gauge_->add(-double(queued_bytes_));
    queued_bytes_ = 0;
}

void stream_channel::mute(std::uint64_t stream) {
    std::lock_guard lock(mutex_);
    muted_.insert(stream);
}

void stream_channel::discard(std::uint64_t stream) {
    std::lock_guard lock(mutex_);
    std::erase_if(queue_, [&](const stream_event& ev) {
        if (ev.stream != stream) return false;
        queued_bytes_ -= ev.bytes;
        if (bytes_gauge_) bytes_gauge_->add(-double(ev.bytes));
        if (ev.is_token()) --queued_tokens_;
        return true;
    });
}

void stream_channel::release(std::size_t bytes) {
    bool room = false;
    {
        std::lock_guard lock(mutex_);
        if (closed_ || bytes == 0) return;
        bytes = std::min(bytes, queued_bytes_);
        queued_bytes_ -= bytes;
        if (bytes_gauge_) bytes_gauge_->add(-double(bytes));
        room = queued_bytes_ < limit_bytes_;
    }
    if (room && room_waiting_) {
        room_waiting_ = false;
        room_timer_.cancel();
    }
}

asio::awaitable<void> stream_channel::wait_room() {
    {
        std::lock_guard lock(mutex_);
        if (limit_bytes_ == 0 || queued_bytes_ < limit_bytes_ || closed_) co_return;
    }
    room_waiting_ = true;
    room_timer_.expires_at(steady_clock::time_point::max());
    auto [ec] = co_await room_timer_.async_wait(asio::as_tuple(asio::use_awaitable));
    (void)ec;  // operation_aborted: woken by release, or the reader was cancelled
    room_waiting_ = false;
}

std::size_t stream_channel::queued_bytes() const {
    std::lock_guard lock(mutex_);
    return queued_bytes_;
}

void stream_channel::shutdown() {
    bool wake = false;
    {
        std::lock_guard lock(mutex_);
        if (shutdown_ || closed_) return;
        shutdown_ = true;
        wake = waiting_;
        waiting_ = false;
    }
    if (wake) asio::post(strand_, [self = shared_from_this()] { self->timer_.cancel(); });
}

bool stream_channel::shutting_down() const {
    std::lock_guard lock(mutex_);
    return shutdown_;
}

void channel_sink::on_token(const actors::generated_token& token) {
    channel_->push(stream_event{stream_, token, steady_clock::now()});
}

void channel_sink::on_finish(const actors::generation_result& result) {
    channel_->push(stream_event{stream_, result, steady_clock::now()});
}

}  // namespace calserve::net
