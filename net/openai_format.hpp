#pragma once
//! OpenAI response shapes: completion / chat.completion objects, their streaming
//! chunks (`text_completion` / `chat.completion.chunk`), the usage chunk of
//! `stream_options.include_usage`, and logprobs in both APIs' layouts.
//!
//! A `response_builder` is fed the engine's tokens in order; it produces chunk
//! text for streaming and keeps the aggregate for a non-streaming answer, so
//! both paths share one formatter. It is used on one strand only.
//!
//! Chat with thinking or tools (`parse_output`): the text goes through the
//! streaming answer parser (model/chat/output.hpp) into `reasoning_content`,
//! `content` and `tool_calls` (deltas as OpenAI streams them: the call's index, id,
//! type and name with empty arguments, then argument fragments). A stop with tool
//! calls says finish_reason "tool_calls"; a max_tokens stop still says "length".
#include <boost/json/object.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/engine.hpp"
#include "model/chat/output.hpp"
#include "net/api_params.hpp"

namespace calserve::net {

// "cmpl-<24 hex>" or "chatcmpl-<24 hex>", unique per process run.
std::string new_request_id(api_kind kind);

// OpenAI finish_reason for an engine finish reason ("stop", "length", ...).
std::string_view finish_reason_name(actors::finish_reason r);

// Renders a token id as text (for logprobs); the engine's decode in production.
using token_text_fn = std::function<std::string(actors::token_id)>;

class response_builder {
public:
    response_builder(api_kind kind, std::string id, std::string model, bool include_usage,
                     const model::sampling_params& sampling, token_text_fn token_text);
    ~response_builder();
    // Chat only: parse the answer into reasoning / content / tool calls.
    void parse_output(bool reasoning, bool tools);

    const std::string& id() const { return id_; }
    // Scoring (docs/api.md "Scoring"): `echo` puts `prompt_text` and, with logprobs, the
    // prompt tokens' scores before the completion (completions); `prompt_logprobs` adds
    // vLLM's prompt_logprobs list (completions: in the choice; chat: top level). The
    // scores come with the result (generation_result::prompt_scores).
    struct scoring {
        bool echo = false;
        std::optional<std::int32_t> prompt_logprobs;
        std::vector<actors::token_id> prompt;
        std::string prompt_text;
    };
    void set_scoring(scoring s) { scoring_ = std::move(s); }
    // Which of the request's `n` choices it builds (the choices' "index"; 0 by default).
    void set_choice_index(std::int64_t index) { index_ = index; }
    // Streaming: the chunk JSON for one token (empty when the token released no text and
    // carries no logprobs); the first chat chunk carries the assistant role.
    std::string token_chunk(const actors::generated_token& t);
    // Streaming: the chunk with finish_reason (and the tail text), then the usage chunk if asked.
    std::string finish_chunk(const actors::generation_result& r);
    std::string usage_chunk(const actors::usage& u) const;
    // Non-streaming: aggregate tokens, then the whole response object.
    void add_token(const actors::generated_token& t);
    std::string final_response(const actors::generation_result& r);
    // The same as a value (the choices of `n > 1` are combined without reparsing).
    boost::json::object final_object(const actors::generation_result& r);

    // The OpenAI finish_reason of this response ("tool_calls" after a stop with calls).
    std::string finish_name(actors::finish_reason r) const;

private:
    struct logprob_state;
    struct parsed_message;
    std::string parsed_chunk(const model::chat_delta& d, boost::json::value* logprobs, std::string_view finish);
    void absorb(const model::chat_delta& d);
    std::string chunk(std::string_view text, boost::json::value* logprobs, std::string_view finish);
    boost::json::value logprobs_for(const actors::generated_token& t);
    void echo_prompt(const actors::generation_result& r);
    boost::json::value prompt_logprobs_json(const actors::generation_result& r) const;

    api_kind kind_;
    std::string id_;
    std::string model_;
    std::int64_t created_;
    std::int64_t index_ = 0;
    bool include_usage_;
    bool logprobs_;
    bool role_sent_ = false;
    std::string text_;                       // aggregate text (non-streaming)
    std::int64_t text_offset_ = 0;           // completion logprobs text_offset
    token_text_fn token_text_;
    std::unique_ptr<logprob_state> lp_;      // aggregate logprobs (non-streaming)
    std::unique_ptr<model::chat_output_parser> parser_;  // null: text passes through
    std::unique_ptr<parsed_message> parsed_;            // aggregate of the parser's deltas
    scoring scoring_;
};

// `n > 1`: one response object from the choices' final objects (each from its own
// builder, in index order) with the request's usage. Values, never text parsed back,
// so each choice's logprobs keep the bits they have with `n = 1`.
std::string combine_choices(std::vector<boost::json::object> finals, const actors::usage& total);

}  // namespace calserve::net
