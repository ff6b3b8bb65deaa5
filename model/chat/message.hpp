#pragma once
//! One chat turn as the chat template consumes it (OpenAI roles), and the options
//! of one rendering (tools, thinking). Plain values: the network layer fills them
//! from a request body, model/tokenizer/chat_template.cpp renders them.
#include <optional>
#include <string>
#include <vector>

namespace calserve::model {

// An assistant turn's function call. `arguments` is inserted verbatim, as the
// template does for a string (OpenAI clients send a JSON string); a client that
// sent an object gets it serialised with `python_json_dumps` (the template's tojson).
struct chat_tool_call {
    std::string name;
    std::string arguments;
};

struct chat_message {
    chat_message() = default;
    chat_message(std::string r, std::string c) : role(std::move(r)), content(std::move(c)) {}

    std::string role;     // system | user | assistant | tool
    std::string content;  // null content renders as ""
    // Assistant: reasoning given apart from content (the template then does not
    // look for <think> in content).
    std::optional<std::string> reasoning_content;
    std::vector<chat_tool_call> tool_calls;  // assistant only
    std::string tool_call_id;                // tool only; the Qwen3 template does not render it
};

struct chat_options {
    bool add_generation_prompt = true;
    // false appends the empty think block after the generation prompt (the
    // template's `enable_thinking is false`); true leaves the model to think.
    bool enable_thinking = false;
    // The request's `tools`, each already serialised as the template's
    // `tool | tojson` prints it (python_json_dumps). Non-empty switches the
    // template to its tools system block.
    std::vector<std::string> tools_json;
};

}  // namespace calserve::model
