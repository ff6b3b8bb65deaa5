#pragma once
//! The OpenAI Responses API (`POST /v1/responses`) as a surface over chat
//! completions: the request is translated into a chat-completions body (then parsed,
//! admitted and generated exactly as one), and the chat answer is rendered as a
//! Response object or as the Responses stream's typed events.
//!
//! Request (responses_request.cpp): `input` (text, or items: messages with text
//! parts, `function_call` and `function_call_output`, earlier `reasoning` items
//! skipped), `instructions` (a system message first), `max_output_tokens`,
//! `temperature`, `top_p`, `text.format` (text / json_object / json_schema),
//! function `tools` and `tool_choice`, `reasoning` (thinking on unless its
//! `effort` is "none" or "minimal"), `stream`, `store`, `parallel_tool_calls`,
//! `metadata`, `user`. Nothing is stored: `previous_response_id`, `conversation`,
//! `background: true`, `include`, built-in tools and non-text input are refused
//! by name (docs/api.md, "The Responses API").
//!
//! Output (responses_format.cpp): output items `reasoning` (its text as
//! `reasoning_text` content), `message` (one `output_text` part) and
//! `function_call`, in the order the model produced them; status `completed`, or
//! `incomplete` with reason `max_output_tokens`. Streaming events, each with `type`
//! and `sequence_number`, SSE `event:` + `data:`: response.created,
//! response.in_progress, response.output_item.added, response.content_part.added,
//! response.output_text.delta / .done, response.reasoning_text.delta / .done,
//! response.function_call_arguments.delta / .done, response.content_part.done,
//! response.output_item.done, then response.completed (or response.incomplete,
//! response.failed). No `[DONE]`.
//!
//! One `responses_stream` per request, used on its strand only.
#include <boost/json/object.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "actors/engine.hpp"
#include "net/api_error.hpp"

namespace calserve::net {

// The chat-completions body a Responses body asks for, or the error naming the field.
std::variant<boost::json::object, api_error> responses_to_chat(const boost::json::object& body);

class responses_stream {
public:
    // `request`: the Responses body (its settings are echoed in the Response object).
    responses_stream(std::string id, std::string model, const boost::json::object& request);

    // Streaming: the SSE text of the opening events (response.created, .in_progress).
    std::string open();
    // Streaming: the events one chat.completion.chunk (JSON text) stands for.
    std::string on_chunk(std::string_view chat_chunk);
    // Streaming: the closing events of a finished request (open items done, then
    // response.completed / .incomplete, or response.failed with `error`).
    std::string close(const actors::generation_result& r, const std::optional<api_error>& error);

    // Non-streaming: the Response object of a chat.completion object.
    boost::json::object response_of(const boost::json::object& chat_completion, const actors::generation_result& r);

private:
    enum class item_kind : std::uint8_t { none, reasoning, message, function_call };
    std::string event(std::string_view type, boost::json::object body);
    std::string open_item(item_kind kind, const boost::json::object* tool_call);
    std::string close_item();
    boost::json::object response_shell(std::string_view status) const;
    static boost::json::object part_of(item_kind kind, std::string_view text);

    std::string id_;
    std::string model_;
    std::int64_t created_;
    boost::json::object echo_;        // request settings the Response object repeats
    std::int64_t sequence_ = 0;
    item_kind open_kind_ = item_kind::none;
    boost::json::object open_item_;   // the item being streamed
    std::string open_text_;           // its text (or arguments) so far
    boost::json::array done_items_;   // items closed, in output order
};

}  // namespace calserve::net
