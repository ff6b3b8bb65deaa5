#pragma once
//! What a verify row emits on the host (docs/speculative.md): the drafts the device's
//! head kept, then its draw, cut where plain decoding would have stopped, so a request
//! sees the tokens (and only the tokens) plain decoding gives it.
//!
//! Rules: the run is drafts[0..accepted) + drawn; it ends after the first stop id in it
//! (EOS or a request stop id: plain decoding ends there) and after `tokens_left` tokens
//! (max_tokens). Stop strings are the Request's to judge on the text, token by token, as
//! for plain steps. The sequence's KV keeps `past + 1 + accepted` positions whatever
//! the cut: a cut run ends the request, whose KV is freed.
#include <cstdint>
#include <span>
#include <vector>

#include "model/core/causal_lm.hpp"

namespace calserve::model::speculative {

std::vector<token_id> emitted_tokens(std::span<const token_id> drafts, std::int64_t accepted, token_id drawn,
                                     std::int64_t tokens_left, std::span<const token_id> stop_ids);

// KV positions a verify row keeps: what it held, its input token and the kept drafts.
constexpr std::int64_t kept_positions(std::int64_t held_before, std::int64_t accepted) { return held_before + 1 + accepted; }

}  // namespace calserve::model::speculative
