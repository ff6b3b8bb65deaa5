// Qwen3's chat template (the Jinja `chat_template` of its tokenizer_config.json),
// written out as C++ for the messages calserve accepts (roles system, user,
// assistant, tool; no tool schemas, no tool_calls, no reasoning_content field).
// Each rule below mirrors one branch of the template, in the template's order.
#include <string>
#include <string_view>

#include "model/tokenizer.hpp"
#include "model/tokenizer_data.hpp"

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

void render_assistant(std::string& out, std::string_view full, bool after_last_query, bool is_last) {
    std::string_view content, reasoning;
    split_reasoning(full, content, reasoning);
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
    const std::size_t last_query = last_query_index(messages);
    for (std::size_t i = 0; i < messages.size(); ++i) {
        const chat_message& m = messages[i];
        if (m.role == "user" || m.role == "system") {
            // A leading system message and later ones render the same way.
            out += im_start;
            out += m.role;
            out += '\n';
            out += m.content;
            out += im_end;
        } else if (m.role == "assistant") {
            render_assistant(out, m.content, i > last_query, i + 1 == messages.size());
        } else {
            render_tool(out, messages, i);
        }
    }
    if (add_generation_prompt) {
        out += im_start;
        out += "assistant\n";
        if (!enable_thinking) out += "<think>\n\n</think>\n\n";
    }
    return out;
}

}  // namespace calserve::model
