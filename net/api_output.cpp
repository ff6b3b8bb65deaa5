// Request fields for structured outputs, tools and reasoning. See api_output.hpp
// and docs/api.md ("Structured outputs and tools").
#include "net/api_output.hpp"
#include "config/json_text.hpp"

#include <boost/json.hpp>

#include "model/tokenizer/python_json.hpp"

namespace calserve::net {
namespace json = boost::json;

namespace {
using maybe_error = std::optional<api_error>;

constexpr std::size_t k_max_tools = 128;
constexpr std::size_t k_max_tool_calls = 128;
constexpr std::int64_t k_max_reasoning_tokens = 1 << 30;

const json::value* field(const json::object& o, std::string_view name) {
    auto it = o.find(name);
    if (it == o.end() || it->value().is_null()) return nullptr;
    return &it->value();
}

maybe_error read_string(const json::object& o, std::string_view name, const std::string& at, std::string& out,
                        bool required) {
    const auto* v = field(o, name);
    if (!v) return required ? std::optional(field_error(at, "is required")) : std::nullopt;
    if (!v->is_string()) return field_error(at, "expected a string");
    out = std::string(v->get_string());
    return std::nullopt;
}

bool valid_function_name(std::string_view n) {
    if (n.empty() || n.size() > 64) return false;
    for (char c : n) {
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
        if (!ok) return false;
    }
    return true;
}

maybe_error read_response_format(const json::object& o, api_output_spec& spec) {
    const auto* v = field(o, "response_format");
    if (!v) return std::nullopt;
    if (!v->is_object()) return field_error("response_format", "expected an object");
    const auto& rf = v->get_object();
    std::string type;
    if (auto e = read_string(rf, "type", "response_format.type", type, true)) return e;
    if (type == "text") return std::nullopt;
    if (type == "json_object") {
        spec.format = format_kind::json_object;
        return std::nullopt;
    }
    if (type != "json_schema") return field_error("response_format.type", "must be text, json_object or json_schema");
    spec.format = format_kind::json_schema;
    const auto* js = field(rf, "json_schema");
    if (!js || !js->is_object()) return field_error("response_format.json_schema", "expected an object");
    const auto& jo = js->get_object();
    if (auto e = read_string(jo, "name", "response_format.json_schema.name", spec.schema_name, true)) return e;
    if (const auto* st = field(jo, "strict")) {
        if (!st->is_bool()) return field_error("response_format.json_schema.strict", "expected a boolean");
        spec.strict = st->get_bool();
    }
    const auto* schema = field(jo, "schema");
    if (!schema) {
        spec.schema_json = "{}";  // OpenAI: no schema = any JSON
    } else if (!schema->is_object() && !schema->is_bool()) {
        return field_error("response_format.json_schema.schema", "expected a JSON Schema object");
    } else {
        spec.schema_json = json_text(*schema);
    }
    return std::nullopt;
}

maybe_error read_tool(const json::value& t, std::size_t i, api_request& r) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) return field_error(at, "expected an object");
    const auto& o = t.get_object();
    std::string type;
    if (auto e = read_string(o, "type", at + ".type", type, true)) return e;
    if (type != "function") return field_error(at + ".type", "only \"function\" tools are supported");
    const auto* fn = field(o, "function");
    if (!fn || !fn->is_object()) return field_error(at + ".function", "expected an object");
    api_tool tool;
    if (auto e = read_string(fn->get_object(), "name", at + ".function.name", tool.name, true)) return e;
    if (!valid_function_name(tool.name)) {
        return field_error(at + ".function.name", "must be 1-64 characters of a-z, A-Z, 0-9, _ and -");
    }
    for (const auto& other : r.output.tools) {
        if (other.name == tool.name) return field_error(at + ".function.name", "duplicate function " + tool.name);
    }
    std::string description;
    if (auto e = read_string(fn->get_object(), "description", at + ".function.description", description, false))
        return e;
    if (const auto* p = field(fn->get_object(), "parameters")) {
        if (!p->is_object()) return field_error(at + ".function.parameters", "expected a JSON Schema object");
        tool.parameters_json = json_text(*p);
    }
    r.output.tools.push_back(std::move(tool));
    // The template prints the tool as given (its `tool | tojson`).
    r.chat.tools_json.push_back(model::python_json_dumps(t));
    return std::nullopt;
}

maybe_error read_tools(const json::object& o, api_request& r) {
    const auto* v = field(o, "tools");
    if (!v) return std::nullopt;
    if (!v->is_array()) return field_error("tools", "expected an array of tools");
    if (v->get_array().size() > k_max_tools) return field_error("tools", "at most " + std::to_string(k_max_tools) + " tools");
    for (std::size_t i = 0; i < v->get_array().size(); ++i) {
        if (auto e = read_tool(v->get_array()[i], i, r)) return e;
    }
    return std::nullopt;
}

maybe_error read_tool_choice(const json::object& o, api_output_spec& spec) {
    const auto* v = field(o, "tool_choice");
    if (!v) return std::nullopt;
    if (v->is_string()) {
        std::string_view s = v->get_string();
        if (s == "none") spec.tool_choice = tool_choice_kind::none;
        else if (s == "auto") spec.tool_choice = tool_choice_kind::automatic;
        else if (s == "required") spec.tool_choice = tool_choice_kind::required;
        else return field_error("tool_choice", "must be none, auto, required or a function object");
    } else if (v->is_object()) {
        const auto* fn = field(v->get_object(), "function");
        if (!fn || !fn->is_object()) return field_error("tool_choice.function", "expected an object");
        if (auto e = read_string(fn->get_object(), "name", "tool_choice.function.name", spec.tool_name, true))
            return e;
        spec.tool_choice = tool_choice_kind::named;
        bool known = false;
        for (const auto& t : spec.tools) known = known || t.name == spec.tool_name;
        if (!known) return field_error("tool_choice.function.name", "no tool named " + spec.tool_name);
    } else {
        return field_error("tool_choice", "expected a string or an object");
    }
    if (spec.tools.empty() && spec.tool_choice != tool_choice_kind::none && spec.tool_choice != tool_choice_kind::automatic)
        return field_error("tool_choice", "needs tools");
    return std::nullopt;
}

maybe_error read_thinking(const json::object& o, api_request& r) {
    if (const auto* kw = field(o, "chat_template_kwargs")) {
        if (!kw->is_object()) return field_error("chat_template_kwargs", "expected an object");
        if (const auto* et = field(kw->get_object(), "enable_thinking")) {
            if (!et->is_bool()) return field_error("chat_template_kwargs.enable_thinking", "expected a boolean");
            r.output.enable_thinking = et->get_bool();
        }
    }
    r.chat.enable_thinking = r.output.enable_thinking;
    if (const auto* v = field(o, "max_reasoning_tokens")) {
        if (!v->is_int64() && !v->is_uint64()) return field_error("max_reasoning_tokens", "expected an integer");
        auto n = v->is_int64() ? v->get_int64() : static_cast<std::int64_t>(std::min<std::uint64_t>(v->get_uint64(), k_max_reasoning_tokens));
        if (n < 0 || n > k_max_reasoning_tokens) return field_error("max_reasoning_tokens", "must be >= 0");
        r.output.max_reasoning_tokens = n;
    }
    return std::nullopt;
}

maybe_error read_tool_calls(const json::value& v, const std::string& at, model::chat_message& out) {
    if (!v.is_array()) return field_error(at, "expected an array");
    if (v.get_array().size() > k_max_tool_calls) return field_error(at, "too many tool calls");
    for (std::size_t i = 0; i < v.get_array().size(); ++i) {
        const std::string ti = at + "[" + std::to_string(i) + "]";
        const auto& c = v.get_array()[i];
        if (!c.is_object()) return field_error(ti, "expected an object");
        // The template accepts {function: {name, arguments}} and {name, arguments}.
        const json::object* fo = &c.get_object();
        std::string fat = ti;
        if (const auto* fn = field(c.get_object(), "function")) {
            if (!fn->is_object()) return field_error(ti + ".function", "expected an object");
            fo = &fn->get_object();
            fat = ti + ".function";
        }
        model::chat_tool_call call;
        if (auto e = read_string(*fo, "name", fat + ".name", call.name, true)) return e;
        const auto* args = field(*fo, "arguments");
        if (!args) call.arguments = "{}";
        else if (args->is_string()) call.arguments = std::string(args->get_string());
        else call.arguments = model::python_json_dumps(*args);
        out.tool_calls.push_back(std::move(call));
    }
    return std::nullopt;
}
}  // namespace

std::optional<api_error> read_output_spec(const json::object& body, api_request& r) {
    if (auto e = read_response_format(body, r.output)) return e;
    if (r.kind == api_kind::completion) {
        if (field(body, "tools")) return field_error("tools", "only on /v1/chat/completions");
        return std::nullopt;
    }
    if (auto e = read_tools(body, r)) return e;
    if (auto e = read_tool_choice(body, r.output)) return e;
    const bool forced_call =
        r.output.tool_choice == tool_choice_kind::required || r.output.tool_choice == tool_choice_kind::named;
    if (forced_call && r.output.format != format_kind::text) {
        return field_error("tool_choice", "cannot be combined with a response_format other than text");
    }
    return read_thinking(body, r);
}

std::optional<api_error> read_message_extras(const json::object& m, const std::string& at, model::chat_message& out) {
    if (out.role == "assistant") {
        if (const auto* tc = field(m, "tool_calls")) {
            if (auto e = read_tool_calls(*tc, at + ".tool_calls", out)) return e;
        }
        if (const auto* rc = field(m, "reasoning_content")) {
            if (!rc->is_string()) return field_error(at + ".reasoning_content", "expected a string");
            out.reasoning_content = std::string(rc->get_string());
        }
    }
    if (out.role == "tool") {
        if (auto e = read_string(m, "tool_call_id", at + ".tool_call_id", out.tool_call_id, false)) return e;
    }
    return std::nullopt;
}

}  // namespace calserve::net
