#pragma once
//! Streaming stop-string matcher for the Request actor.
//!
//! Role: text deltas (from the streaming detokenizer) go in; text that can no longer
//! be part of a stop string comes out at once, so a client sees tokens as soon as they
//! are safe. When a stop string completes, the text before it is released and the stop
//! string and everything after it are dropped (OpenAI semantics: the stop sequence is
//! not returned).
//!
//! Invariants:
//!  - held text is exactly the longest suffix of the text seen so far that is a proper
//!    prefix of some stop string (so nothing is delayed without reason);
//!  - released text + held text == all text pushed so far, until a stop completes;
//!  - when several stop strings complete in the same push, the one that ends first
//!    wins, and on a tie the one that starts first (the longer);
//!  - matching is on bytes; with valid UTF-8 input and stop strings the cut points are
//!    always character boundaries (UTF-8 is self-synchronising), never inside one.
//! Empty stop strings are ignored. After a stop, push() and flush() return nothing.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace calserve::model {

struct stop_push_result {
    std::string released;  // safe to stream to the client now
    bool stopped = false;  // a stop string completed in this push (or earlier)
    std::size_t stop_index = 0;  // which stop string (index into the constructor's list) when stopped
};

class stop_matcher {
public:
    explicit stop_matcher(std::vector<std::string> stops = {});

    stop_push_result push(std::string_view delta);
    /// End of generation: the held text (it can no longer become a stop string).
    std::string flush();

    bool stopped() const { return stopped_; }
    std::size_t held_bytes() const { return held_.size(); }

private:
    std::size_t hold_length(std::string_view text) const;

    std::vector<std::string> stops_;
    std::vector<std::size_t> stop_ids_;  // original index of each kept stop string
    std::string held_;
    bool stopped_ = false;
    std::size_t stop_index_ = 0;
};

}  // namespace calserve::model
