#pragma once
//! Incremental detokenizer for streaming responses: ids go in one at a time and
//! text comes out as soon as it is complete UTF-8.
//!
//! Bytes of a code point split across tokens (emoji, CJK) are held back until the
//! sequence completes; invalid bytes become U+FFFD exactly as `tokenizer::decode`
//! would replace them. Invariants: every string returned is valid UTF-8 and never
//! ends inside a code point; the concatenation of all `push` results and the final
//! `flush` equals `decode()` of the same ids. Unknown ids contribute nothing (the
//! server only feeds ids the model produced; `decode` is where they are rejected).
//! Not thread-safe: one decoder per response stream.
#include <memory>
#include <string>

#include "model/tokenizer/tokenizer.hpp"

namespace calserve::model {

class stream_decoder {
public:
    explicit stream_decoder(std::shared_ptr<const tokenizer> tok);
    // Text completed by `id` (possibly empty).
    std::string push(token_id id);
    // Emits whatever is pending (an unfinished sequence becomes U+FFFD) and resets.
    std::string flush();
    // Bytes held back, waiting for the rest of a code point (0..3).
    std::size_t pending_bytes() const { return pending_.size(); }

private:
    std::shared_ptr<const tokenizer> tok_;
    std::string pending_;  // a valid but unfinished UTF-8 prefix, at most 3 bytes
};

}  // namespace calserve::model
