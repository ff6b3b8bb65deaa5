#pragma once
//! Streaming parser of a Qwen3 chat answer into the OpenAI message parts:
//! reasoning (between <think> and </think>), content, and tool calls
//! (<tool_call>{"name": ..., "arguments": ...}</tool_call> blocks).
//!
//! Text goes in as the engine releases it (any split, tags may straddle pushes);
//! each push returns what became certain. A suffix that may still turn into a tag
//! is held back, never emitted twice. Pure and deterministic: streaming and
//! non-streaming responses are both built from its deltas.
//!
//! Rules (docs/api.md, "Reasoning and tool calls"):
//!  - reasoning mode (thinking on): the answer starts inside the think block (a
//!    leading "<think>" is consumed); text up to "</think>" is reasoning, its
//!    leading and trailing newlines dropped; newlines after "</think>" are dropped.
//!  - tools mode: "<tool_call>" opens a call. Once the block reads
//!    `{"name": "<fn>", "arguments": ` the call is announced (index, id, name) and
//!    the arguments stream as they come, the closing "}" of the wrapper held back
//!    until "</tool_call>". A block in another shape is parsed whole at its end;
//!    one that is not a JSON object with a string name stays content.
//!    Whitespace between calls is dropped.
//!  - finish: what is held back is released as text of the current part; an
//!    unterminated call keeps the arguments seen so far (the response then says
//!    finish_reason "length" and its arguments may be cut).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace calserve::model {

struct tool_call_delta {
    std::size_t index = 0;
    std::string id;         // set on the first delta of a call only
    std::string name;       // likewise
    std::string arguments;  // a fragment
    bool opens = false;     // first delta of the call
};

struct chat_delta {
    std::string reasoning;
    std::string content;
    std::vector<tool_call_delta> tool_calls;
    bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

struct chat_output_options {
    bool reasoning = false;  // the prompt left the think block open (enable_thinking)
    bool tools = false;      // parse <tool_call> blocks
    std::string id_prefix;   // tool call ids are id_prefix + index ("call_<hex>_0")
};

class chat_output_parser {
public:
    explicit chat_output_parser(chat_output_options options);
    chat_delta push(std::string_view text);
    chat_delta finish();
    std::size_t tool_calls() const { return calls_; }
    bool in_tool_call() const { return state_ == state::tool_call; }
    bool in_reasoning() const { return state_ == state::reasoning; }

private:
    enum class state : std::uint8_t { reasoning, content, tool_call };
    void step_reasoning(chat_delta& out, bool final);
    void step_content(chat_delta& out, bool final);
    void step_tool_call(chat_delta& out, bool final);
    void emit_content(chat_delta& out, std::string_view text);
    void open_call(chat_delta& out, std::string name);
    void close_call(chat_delta& out);
    bool try_header(chat_delta& out);
    void stream_arguments(chat_delta& out, bool final);
    static std::size_t final_arguments_end(std::string_view block, std::size_t from);

    chat_output_options options_;
    state state_;
    std::string buf_;            // unconsumed text
    bool at_start_ = true;       // nothing of the current part emitted yet
    std::string pending_ws_;     // content whitespace held back (dropped before a call)
    std::string ws_before_call_; // content whitespace before the open block
    std::string pending_nl_;     // reasoning newlines held back (dropped before </think>)
    // Current tool call block.
    std::string block_;          // block text seen so far
    bool header_ = false;        // announced: streaming its arguments
    std::size_t args_from_ = 0;  // offset in block_ where the arguments begin
    std::size_t args_sent_ = 0;  // offset in block_ up to which they were sent
    std::size_t calls_ = 0;
};

}  // namespace calserve::model
