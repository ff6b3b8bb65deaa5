// Engine thread -> strand event queue. See stream_channel.hpp.
#include "net/stream_channel.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace calserve::net {
namespace asio = boost::asio;

stream_channel::stream_channel(asio::any_io_executor strand, std::size_t limit)
    : strand_(strand), timer_(strand), limit_(limit == 0 ? 1 : limit) {}

void stream_channel::push(stream_event ev) {
    bool wake = false;
    {
        std::lock_guard lock(mutex_);
        if (closed_) return;
        if (ev.is_token()) {
            if (muted_.contains(ev.stream)) return;
            if (queued_tokens_ >= limit_) {
                muted_.insert(ev.stream);
                overflowed_.push_back(ev.stream);
            } else {
                ++queued_tokens_;
                queue_.push_back(std::move(ev));
            }
        } else {
            if (ev.body.index() == 1) muted_.erase(ev.stream);
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
        if (!queue_.empty() || !overflowed_.empty() || closed_) co_return;
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
}

void stream_channel::mute(std::uint64_t stream) {
    std::lock_guard lock(mutex_);
    muted_.insert(stream);
}

void channel_sink::on_token(const actors::generated_token& token) {
    channel_->push(stream_event{stream_, token, steady_clock::now()});
}

void channel_sink::on_finish(const actors::generation_result& result) {
    channel_->push(stream_event{stream_, result, steady_clock::now()});
}

}  // namespace calserve::net
