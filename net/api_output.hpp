#pragma once
//! The parts of a request body that shape the answer rather than the sampling:
//! `response_format`, `tools` / `tool_choice`, `chat_template_kwargs`,
//! `max_reasoning_tokens`, and the tool-related fields of chat messages
//! (assistant `tool_calls` and `reasoning_content`, tool `tool_call_id`).
//! Pure checks, each error naming its field; used by api_params.cpp.
#include <optional>
#include <string>

#include "net/api_params.hpp"

namespace boost::json {
class object;
}

namespace calserve::net {

std::optional<api_error> read_output_spec(const boost::json::object& body, api_request& r);
// The message fields beyond role/content; `at` is "messages[i]".
std::optional<api_error> read_message_extras(const boost::json::object& m, const std::string& at,
                                             model::chat_message& out);

}  // namespace calserve::net
