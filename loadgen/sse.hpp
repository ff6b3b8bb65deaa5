#pragma once
//! Incremental Server-Sent-Events parsing for `calserve bench`: bytes arrive in
//! arbitrary pieces (chunked HTTP), events are `data:` lines ended by a blank line.
//!
//! Fault model: a malformed chunk is reported as such (never thrown); bytes after
//! an incomplete line are kept until the next feed. Invariant: feeding a stream in
//! any split yields the same events in the same order.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace calserve::loadgen {

class sse_parser {
public:
    using event_fn = std::function<void(std::string_view data)>;

    // Parses `bytes`, calling `on_event` once per complete event (its data lines
    // joined with '\n'). Comment lines (':') and other fields are ignored.
    void feed(std::string_view bytes, const event_fn& on_event);

private:
    void line(std::string_view l, const event_fn& on_event);
    std::string pending_;  // bytes of an unfinished line
    std::string data_;     // data of the event being assembled
    bool has_data_ = false;
};

// What one OpenAI completion stream event means to the client clock.
struct stream_chunk {
    bool done = false;        // `[DONE]`
    bool malformed = false;   // not JSON / not an object
    bool has_error = false;   // `{"error": ...}` event
    std::string error;        // its message
    std::int64_t text_events = 0;  // choices carrying non-empty text (token arrivals)
    std::int64_t usage_completion_tokens = -1;  // from a usage chunk, else -1
    std::int64_t usage_prompt_tokens = -1;      // from a usage chunk, else -1
    std::int64_t usage_cached_tokens = -1;      // usage.prompt_tokens_details.cached_tokens, else -1
    std::string finish_reason;
    std::string id;
};

stream_chunk parse_stream_chunk(std::string_view data);

}  // namespace calserve::loadgen
