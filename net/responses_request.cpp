// Responses API request -> chat-completions body. See responses_api.hpp.
#include "net/responses_api.hpp"

#include <boost/json.hpp>

namespace calserve::net {
namespace json = boost::json;

namespace {
using body_or_error = std::variant<json::object, api_error>;

const json::value* field(const json::object& o, std::string_view name) {
    auto it = o.find(name);
    if (it == o.end() || it->value().is_null()) return nullptr;
    return &it->value();
}

bool is_text(const json::value* v, std::string_view text) { return v && v->is_string() && v->get_string() == text; }

// Fields copied as they are: the chat parser checks them (names and ranges alike).
constexpr std::string_view k_passed[] = {"model", "temperature", "top_p", "stream", "top_k", "min_p", "seed",
                                         "timeout_ms", "cache_salt", "logit_bias", "presence_penalty",
                                         "frequency_penalty", "repetition_penalty", "max_reasoning_tokens"};
// Fields that ask for what is not served (nothing is stored, no built-in tools).
constexpr std::pair<std::string_view, std::string_view> k_refused[] = {
    {"previous_response_id", "responses are not stored; send the whole conversation in input"},
    {"conversation", "conversations are not stored; send the whole conversation in input"},
    {"prompt", "stored prompt templates are not supported"},
    {"max_tool_calls", "is not supported"},
    {"top_logprobs", "is not supported on /v1/responses; use /v1/chat/completions"},
    {"prompt_logprobs", "is not supported on /v1/responses; use /v1/chat/completions"},
};

// A message's text: a string, or parts of type input_text / output_text / text.
std::optional<api_error> text_of(const json::value& c, const std::string& at, std::string& out) {
    if (c.is_string()) {
        out = std::string(c.get_string());
        return std::nullopt;
    }
    if (!c.is_array()) return field_error(at, "expected a string or an array of text parts");
    for (std::size_t i = 0; i < c.get_array().size(); ++i) {
        const auto& part = c.get_array()[i];
        const std::string pat = at + "[" + std::to_string(i) + "]";
        const auto* type = part.is_object() ? field(part.get_object(), "type") : nullptr;
        const auto* text = part.is_object() ? field(part.get_object(), "text") : nullptr;
        if (!type || !type->is_string()) return field_error(pat + ".type", "expected a string");
        const auto t = type->get_string();
        if (t != "input_text" && t != "output_text" && t != "text") {
            return field_error(pat + ".type", std::string(t) + " is not supported (text input only)");
        }
        if (!text || !text->is_string()) return field_error(pat + ".text", "expected a string");
        out += text->get_string();
    }
    return std::nullopt;
}

std::optional<api_error> function_call(const json::object& item, const std::string& at, json::array& messages) {
    for (const char* name : {"call_id", "name", "arguments"}) {
        const auto* v = field(item, name);
        if (!v || !v->is_string()) return field_error(at + "." + name, "expected a string");
    }
    json::object call{{"id", item.at("call_id")},
                      {"type", "function"},
                      {"function", json::object{{"name", item.at("name")}, {"arguments", item.at("arguments")}}}};
    // Calls in a row are one assistant turn.
    if (!messages.empty()) {
        auto& last = messages.back().as_object();
        if (is_text(last.if_contains("role"), "assistant") && last.contains("tool_calls")) {
            last["tool_calls"].as_array().push_back(std::move(call));
            return std::nullopt;
        }
    }
    messages.push_back(json::object{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array{call}}});
    return std::nullopt;
}

std::optional<api_error> input_item(const json::value& v, const std::string& at, json::array& messages) {
    if (!v.is_object()) return field_error(at, "expected an object");
    const auto& item = v.get_object();
    const auto* type = field(item, "type");
    if (type && !type->is_string()) return field_error(at + ".type", "expected a string");
    const std::string t = type ? std::string(type->get_string()) : "message";
    if (t == "reasoning") return std::nullopt;  // earlier reasoning is not sent back to the model
    if (t == "function_call") return function_call(item, at, messages);
    if (t == "function_call_output") {
        const auto* id = field(item, "call_id");
        const auto* out = field(item, "output");
        if (!id || !id->is_string()) return field_error(at + ".call_id", "expected a string");
        if (!out || !out->is_string()) return field_error(at + ".output", "expected a string");
        messages.push_back(json::object{{"role", "tool"}, {"tool_call_id", *id}, {"content", *out}});
        return std::nullopt;
    }
    if (t != "message") return field_error(at + ".type", t + " is not supported");
    const auto* role = field(item, "role");
    if (!role || !role->is_string()) return field_error(at + ".role", "expected a string");
    const auto* content = field(item, "content");
    if (!content) return field_error(at + ".content", "is required");
    std::string text;
    if (auto e = text_of(*content, at + ".content", text)) return e;
    messages.push_back(json::object{{"role", *role}, {"content", std::move(text)}});
    return std::nullopt;
}

std::optional<api_error> read_input(const json::object& body, json::array& messages) {
    if (const auto* ins = field(body, "instructions")) {
        if (!ins->is_string()) return field_error("instructions", "expected a string");
        messages.push_back(json::object{{"role", "system"}, {"content", *ins}});
    }
    const auto* input = field(body, "input");
    if (!input) return field_error("input", "is required");
    if (input->is_string()) {
        messages.push_back(json::object{{"role", "user"}, {"content", *input}});
        return std::nullopt;
    }
    if (!input->is_array()) return field_error("input", "expected a string or an array of items");
    for (std::size_t i = 0; i < input->get_array().size(); ++i) {
        if (auto e = input_item(input->get_array()[i], "input[" + std::to_string(i) + "]", messages)) return e;
    }
    return std::nullopt;
}

std::optional<api_error> read_tools(const json::object& body, json::object& chat) {
    if (const auto* tools = field(body, "tools")) {
        if (!tools->is_array()) return field_error("tools", "expected an array");
        json::array out;
        for (std::size_t i = 0; i < tools->get_array().size(); ++i) {
            const std::string at = "tools[" + std::to_string(i) + "]";
            const auto& t = tools->get_array()[i];
            const auto* type = t.is_object() ? field(t.get_object(), "type") : nullptr;
            if (!is_text(type, "function")) return field_error(at + ".type", "only function tools are supported");
            json::object fn = t.get_object();
            fn.erase("type");
            out.push_back(json::object{{"type", "function"}, {"function", std::move(fn)}});
        }
        chat["tools"] = std::move(out);
    }
    if (const auto* choice = field(body, "tool_choice")) {
        if (choice->is_object()) {
            const auto* name = field(choice->get_object(), "name");
            if (!name) return field_error("tool_choice.name", "is required");
            chat["tool_choice"] = json::object{{"type", "function"}, {"function", json::object{{"name", *name}}}};
        } else {
            chat["tool_choice"] = *choice;
        }
    }
    return std::nullopt;
}

std::optional<api_error> read_format(const json::object& body, json::object& chat) {
    const auto* text = field(body, "text");
    if (!text) return std::nullopt;
    if (!text->is_object()) return field_error("text", "expected an object");
    const auto* format = field(text->get_object(), "format");
    if (!format) return std::nullopt;
    if (!format->is_object()) return field_error("text.format", "expected an object");
    json::object f = format->get_object();
    const auto* type = field(f, "type");
    if (!type || !type->is_string()) return field_error("text.format.type", "expected a string");
    if (!is_text(type, "json_schema")) {
        chat["response_format"] = json::object{{"type", *type}};
        return std::nullopt;
    }
    f.erase("type");
    chat["response_format"] = json::object{{"type", "json_schema"}, {"json_schema", std::move(f)}};
    return std::nullopt;
}

std::optional<api_error> read_refusals(const json::object& body) {
    for (const auto& [name, why] : k_refused) {
        if (field(body, name)) return field_error(name, why);
    }
    if (const auto* bg = field(body, "background"); bg && (!bg->is_bool() || bg->get_bool())) {
        return field_error("background", "true is not supported");
    }
    if (const auto* inc = field(body, "include"); inc && (!inc->is_array() || !inc->get_array().empty())) {
        return field_error("include", "is not supported (no extra output data)");
    }
    if (const auto* tr = field(body, "truncation"); tr && !is_text(tr, "disabled")) {
        return field_error("truncation", "only \"disabled\" is supported (a prompt too long is a 400)");
    }
    if (const auto* st = field(body, "store"); st && !st->is_bool()) return field_error("store", "expected a boolean");
    return std::nullopt;
}
}  // namespace

std::variant<json::object, api_error> responses_to_chat(const json::object& body) {
    if (auto e = read_refusals(body)) return *e;
    json::object chat;
    for (auto name : k_passed) {
        if (const auto* v = field(body, name)) chat[name] = *v;
    }
    json::array messages;
    if (auto e = read_input(body, messages)) return *e;
    chat["messages"] = std::move(messages);
    if (const auto* m = field(body, "max_output_tokens")) chat["max_tokens"] = *m;
    if (auto e = read_tools(body, chat)) return *e;
    if (auto e = read_format(body, chat)) return *e;
    if (const auto* r = field(body, "reasoning")) {
        if (!r->is_object()) return field_error("reasoning", "expected an object");
        const auto* effort = field(r->get_object(), "effort");
        const bool off = is_text(effort, "none") || is_text(effort, "minimal");
        chat["chat_template_kwargs"] = json::object{{"enable_thinking", !off}};
    }
    return chat;
}

}  // namespace calserve::net
