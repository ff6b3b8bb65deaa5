#pragma once
//! Fields other servers (OpenAI's legacy completions, vLLM) accept that change what
//! a request means. Each one here is either implemented or refused with a 400 that
//! names it, never accepted and ignored (docs/api.md, "Fields refused by name"):
//!
//! | field                                   | here                                              |
//! | --------------------------------------- | ------------------------------------------------- |
//! | `add_generation_prompt` (chat)          | implemented (false: the template opens no turn)   |
//! | `continue_final_message` (chat)         | false accepted; true refused                      |
//! | `echo` (completions)                    | implemented: the prompt (and its logprobs) first  |
//! | `echo` (chat)                           | false accepted; true refused                      |
//! | `prompt_logprobs`                       | implemented, 0..20 alternatives (not with stream) |
//! | `max_tokens: 0`                         | scoring only (with echo or prompt_logprobs)       |
//! | `best_of`                               | equal to `n` (or 1 with no `n`) accepted, else refused |
//! | `suffix` (completions)                  | empty accepted; text refused (no insertion)       |
//! | `stream_options.continuous_usage_stats` | false accepted; true refused                      |
//!
//! A `null` value is "not given", as for every field. Pure checks; used by api_params.cpp.
#include <optional>

#include "net/api_params.hpp"

namespace boost::json {
class object;
}

namespace calserve::net {

std::optional<api_error> read_compat_fields(const boost::json::object& body, api_request& r);

}  // namespace calserve::net
