// Qwen3's chat template (the Jinja `chat_template` of its tokenizer_config.json),
// written out as C++ for the messages calserve accepts: roles system, user,
// assistant (with tool_calls and reasoning_content), tool; the `tools` system
// block; enable_thinking. Each rule below mirrors one branch of the template, in
// the template's order. The template itself gives `/think` and `/no_think` in a
// message no meaning: they are rendered as text, and the model honours them.
#include <string>
#include <string_view>

#include "model/tokenizer/tokenizer.hpp"
#include "model/tokenizer/data.hpp"

namespace calserve::model {
namespace {

constexpr std::string_view im_start = "<|im_start|>";
constexpr std::string_view im_end = "<|im_end|>\n";

std::string_view lstrip_newlines(std::string_view s) {
    while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
    return s;
}
std::string_view rstrip_newlines(std::string_view s) {
    while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
    return s;
}

bool is_tool_response(std::string_view content) {
    return content.starts_with("<tool_response>") && content.ends_with("</tool_response>");
}

// ns.last_query_index: the last user message that is not a wrapped tool response
// (messages.size()-1 when there is none).
std::size_t last_query_index(std::span<const chat_message> messages) {
    for (std::size_t i = messages.size(); i-- > 0;) {
        if (messages[i].role == "user" && !is_tool_response(messages[i].content)) return i;
    }
    return messages.size() - 1;
}

// The template's split of an assistant turn into reasoning and visible content:
// content = text after the last "</think>" (leading newlines dropped); reasoning =
// text before the first "</think>", after the last "<think>" in it, newlines trimmed.
void split_reasoning(std::string_view full, std::string_view& content, std::string_view& reasoning) {
    content = full;
    reasoning = {};
    auto close = full.find("</think>");
    if (close == std::string_view::npos) return;
    content = lstrip_newlines(full.substr(full.rfind("</think>") + 8));
    std::string_view before = rstrip_newlines(full.substr(0, close));
    auto open = before.rfind("<think>");
    if (open != std::string_view::npos) before = before.substr(open + 7);
    reasoning = lstrip_newlines(before);
}

constexpr std::string_view tools_intro =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view tools_outro =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";

// The opening system block: the tools list (with the first system message in
// front of it), or the first system message alone.
void render_system_head(std::string& out, std::span<const chat_message> messages, const chat_options& options) {
    const bool first_system = messages.front().role == "system";
    if (options.tools_json.empty()) {
        if (!first_system) return;
        out += im_start;
        out += "system\n";
        out += messages.front().content;
        out += im_end;
        return;
    }
    out += im_start;
    out += "system\n";
    if (first_system) {
        out += messages.front().content;
        out += "\n\n";
    }
    out += tools_intro;
    for (const std::string& tool : options.tools_json) {
        out += '\n';
        out += tool;
    }
    out += tools_outro;
}

void render_tool_calls(std::string& out, const chat_message& m, std::string_view content) {
    for (std::size_t k = 0; k < m.tool_calls.size(); ++k) {
        if (k > 0 || !content.empty()) out += '\n';
        out += "<tool_call>\n{\"name\": \"";
        out += m.tool_calls[k].name;
        out += "\", \"arguments\": ";
        out += m.tool_calls[k].arguments;
        out += "}\n</tool_call>";
    }
}

void render_assistant(std::string& out, const chat_message& m, bool after_last_query, bool is_last) {
    std::string_view content = m.content, reasoning;
    if (m.reasoning_content) {
        reasoning = *m.reasoning_content;
    } else {
        split_reasoning(m.content, content, reasoning);
    }
    out += im_start;
    out += "assistant\n";
    if (after_last_query && (is_last || !reasoning.empty())) {
        out += "<think>\n";
        out += rstrip_newlines(lstrip_newlines(reasoning));
        out += "\n</think>\n\n";
        out += lstrip_newlines(content);
    } else {
        out += content;
    }
    render_tool_calls(out, m, content);
    out += im_end;
}

void render_tool(std::string& out, std::span<const chat_message> messages, std::size_t i) {
    if (i == 0 || messages[i - 1].role != "tool") {
        out += im_start;
        out += "user";
    }
    out += "\n<tool_response>\n";
    out += messages[i].content;
    out += "\n</tool_response>";
    if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += im_end;
}

}  // namespace

result<std::string> tokenizer::apply_chat_template(std::span<const chat_message> messages, bool add_generation_prompt,
                                                   bool enable_thinking) const {
    chat_options options;
    options.add_generation_prompt = add_generation_prompt;
    options.enable_thinking = enable_thinking;
    return apply_chat_template(messages, options);
}

result<std::string> tokenizer::apply_chat_template(std::span<const chat_message> messages,
                                                   const chat_options& options) const {
    if (!data_->chatml_template) {
        return make_error(status::unsupported, "the tokenizer's chat_template is not ChatML (Qwen3 template expected)");
    }
    if (messages.empty()) return make_error(status::invalid_argument, "chat template needs at least one message");
    for (const chat_message& m : messages) {
        if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") {
            return make_error(status::invalid_argument, "unknown chat role '" + m.role + "'");
        }
    }
    std::string out;
    render_system_head(out, messages, options);
    const std::size_t last_query = last_query_index(messages);
    for (std::size_t i = 0; i < messages.size(); ++i) {
        const chat_message& m = messages[i];
        if (m.role == "user" || (m.role == "system" && i > 0)) {
            out += im_start;
            out += m.role;
            out += '\n';
            out += m.content;
            out += im_end;
        } else if (m.role == "assistant") {
            render_assistant(out, m, i > last_query, i + 1 == messages.size());
        } else if (m.role == "tool") {
            render_tool(out, messages, i);
        }
    }
    if (options.add_generation_prompt) {
        out += im_start;
        out += "assistant\n";
        if (!options.enable_thinking) out += "<think>\n\n</think>\n\n";
    }
    return out;
}

}  // namespace calserve::model
