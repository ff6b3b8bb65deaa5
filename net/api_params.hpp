#pragma once
//! OpenAI request bodies -> validated `api_request`s. Parsing is pure (no engine
//! calls): `parse_completion` / `parse_chat` check types and ranges of every
//! field and return an `api_error` that names the field. `prepare_prompt` then
//! tokenizes through the engine (chat template first for chat) and checks the
//! usable context, so an over-long request is a 400 before any device work.
//!
//! The same parser serves HTTP bodies and WebSocket `generate` messages.
//! Fields that change the answer are implemented or refused by name
//! (net/api_compat.hpp); other unknown fields are ignored (OpenAI clients send
//! extras such as `user`).
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "actors/engine.hpp"
#include "net/api_error.hpp"

namespace boost::json {
class object;
}

namespace calserve::net {

// `responses` (POST /v1/responses) is parsed and generated as `chat` after its body
// is translated (net/responses_api.hpp); only its rendering differs.
enum class api_kind : std::uint8_t { completion, chat, responses };

// `response_format.type`.
enum class format_kind : std::uint8_t { text, json_object, json_schema };
// `tool_choice`: "none", "auto" (default with tools), "required", or one named function.
enum class tool_choice_kind : std::uint8_t { none, automatic, required, named };

struct api_tool {
    std::string name;
    std::string parameters_json;  // the parameters schema (JSON text); empty = none given
};

// What constrains the output (docs/api.md, "Structured outputs and tools").
struct api_output_spec {
    format_kind format = format_kind::text;
    std::string schema_json;                      // json_schema: the schema (JSON text)
    std::string schema_name;
    bool strict = false;
    std::vector<api_tool> tools;
    tool_choice_kind tool_choice = tool_choice_kind::automatic;
    std::string tool_name;                        // named choice
    bool enable_thinking = false;                 // chat_template_kwargs.enable_thinking
    std::optional<std::int64_t> max_reasoning_tokens;
    // Parse the output into reasoning / content / tool calls (chat with thinking
    // or tools); else the text is passed through as before.
    bool parses_output(api_kind kind) const {
        return kind == api_kind::chat && (enable_thinking || (!tools.empty() && tool_choice != tool_choice_kind::none));
    }
    bool constrained() const {
        return format != format_kind::text || tool_choice == tool_choice_kind::required ||
               tool_choice == tool_choice_kind::named;
    }
};

// The most choices one request may ask for (`n`).
inline constexpr std::int64_t k_max_choices = 16;

struct api_request {
    api_kind kind = api_kind::completion;
    std::string model;                                // empty = the served model
    std::variant<std::string, std::vector<actors::token_id>, std::vector<actors::chat_message>> prompt;
    std::optional<std::int64_t> max_tokens;           // none = server default, clamped to the context
    bool stream = false;
    std::int64_t n = 1;                               // choices (k_max_choices at most); each its own engine request
    bool include_usage = false;                       // stream_options.include_usage
    actors::generation_request gen;                   // sampling, stop, ignore_eos, timeout (prompt/id later)
    std::shared_ptr<actors::engine> target;           // the generation serving `model` (set at admission)
    api_output_spec output;                           // response_format, tools, thinking
    model::chat_options chat;                         // chat: tools (as tojson), thinking, generation prompt
    // Scoring (docs/api.md "Scoring"): `echo` (completions) puts the prompt, and with
    // logprobs its tokens' logprobs, before the completion; `prompt_logprobs` (vLLM) lists
    // every prompt token's logprob with that many alternatives; max_tokens 0 (`score_only`)
    // generates nothing. gen.score_top_n asks the engine for the scores.
    bool echo = false;
    std::optional<std::int32_t> prompt_logprobs;
    bool score_only = false;
};

struct parse_limits {
    std::int64_t vocab_size = 0;                      // token ids and logit_bias keys must be below it
};

// `body` is the JSON text. Errors name the field (`param`).
std::variant<api_request, api_error> parse_request(api_kind kind, const boost::json::object& body,
                                                   const parse_limits& limits);
std::variant<api_request, api_error> parse_request_text(api_kind kind, std::string_view body,
                                                        const parse_limits& limits);

// What prepare_prompt did with a text prompt (for the tokenize metrics).
struct prompt_work {
    std::size_t bytes_tokenized = 0;  // text handed to the tokenizer
    bool refused_by_bytes = false;    // longer than card().max_prompt_bytes: never tokenized
};

// Tokenizes the prompt into `request.gen.prompt`, compiles the output constraint
// (net/output_constraint.hpp) and settles max_tokens against the
// model's usable context (`default_max_tokens` when the request gives none). A
// text longer than the model card's max_prompt_bytes is refused (context_overflow)
// without tokenizing; otherwise tokenizing stops once the prompt is known not to fit.
std::optional<api_error> prepare_prompt(api_request& request, const actors::engine& engine,
                                        std::int64_t default_max_tokens, prompt_work* work = nullptr);

}  // namespace calserve::net
