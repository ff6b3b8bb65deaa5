// The grammar a request's response_format / tool_choice asks for. See output_constraint.hpp.
#include "net/output_constraint.hpp"

#include "model/grammar/grammar.hpp"

namespace calserve::net {
namespace grammar = model::grammar;

namespace {
bool ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool ident_char(char c) { return ident_start(c) || (c >= '0' && c <= '9') || c == '-'; }

// Copies a "literal" or [class] starting at s[i] (escapes included); returns the end.
std::size_t copy_quoted(std::string_view s, std::size_t i, char close, std::string& out) {
    out += s[i++];
    while (i < s.size()) {
        char c = s[i++];
        out += c;
        if (c == '\\' && i < s.size()) {
            out += s[i++];
        } else if (c == close) {
            break;
        }
    }
    return i;
}

result<std::string> arguments_ebnf(const api_tool& tool, std::size_t index) {
    if (tool.parameters_json.empty()) return grammar::json_object_ebnf();
    auto g = grammar::json_schema_to_ebnf(tool.parameters_json);
    if (!g) {
        return make_error(status::invalid_argument,
                          "tools[" + std::to_string(index) + "].function.parameters: " + g.error().message);
    }
    return std::move(*g);
}
}  // namespace

std::string prefix_rules(std::string_view s, std::string_view prefix) {
    std::string out;
    out.reserve(s.size() + s.size() / 4);
    std::size_t i = 0;
    while (i < s.size()) {
        char c = s[i];
        if (c == '"') {
            i = copy_quoted(s, i, '"', out);
        } else if (c == '[') {
            i = copy_quoted(s, i, ']', out);
        } else if (c == '#') {
            while (i < s.size() && s[i] != '\n') out += s[i++];
        } else if (ident_start(c)) {
            std::size_t j = i;
            while (j < s.size() && ident_char(s[j])) ++j;
            out += prefix;
            out += s.substr(i, j - i);
            i = j;
        } else {
            out += c;
            ++i;
        }
    }
    return out;
}

result<std::string> tool_call_ebnf(const api_output_spec& spec) {
    std::string calls = "call ::= ";
    std::string rules;
    bool first = true;
    for (std::size_t i = 0; i < spec.tools.size(); ++i) {
        const auto& tool = spec.tools[i];
        if (spec.tool_choice == tool_choice_kind::named && tool.name != spec.tool_name) continue;
        auto args = arguments_ebnf(tool, i);
        if (!args) return args.error();
        const std::string prefix = "t" + std::to_string(i) + "-";
        rules += prefix_rules(*args, prefix) + "\n";
        // Function names are [A-Za-z0-9_-]: nothing to escape in the literal.
        rules += prefix + "call ::= \"<tool_call>\\n{\\\"name\\\": \\\"" + tool.name + "\\\", \\\"arguments\\\": \" " +
                 prefix + "root \"}\\n</tool_call>\"\n";
        calls += (first ? "" : " | ") + prefix + "call";
        first = false;
    }
    const bool many = spec.tool_choice == tool_choice_kind::required;
    return std::string(many ? "root ::= call (\"\\n\" call)*\n" : "root ::= call\n") + calls + "\n" + rules;
}

std::optional<api_error> prepare_constraint(api_request& r, const actors::engine& engine) {
    auto& spec = r.output;
    auto& c = r.gen.constraint;
    c.thinking = r.kind == api_kind::chat && spec.enable_thinking;
    if (c.thinking && spec.max_reasoning_tokens) c.max_reasoning_tokens = *spec.max_reasoning_tokens;
    std::string param;
    if (spec.format == format_kind::json_object) {
        c.kind = grammar::grammar_kind::json_object;
        param = "response_format";
    } else if (spec.format == format_kind::json_schema) {
        c.kind = grammar::grammar_kind::json_schema;
        c.grammar = spec.schema_json;
        param = "response_format.json_schema.schema";
    } else if (spec.tool_choice == tool_choice_kind::required || spec.tool_choice == tool_choice_kind::named) {
        auto ebnf = tool_call_ebnf(spec);
        if (!ebnf) {
            auto msg = ebnf.error().message;
            return api_error{status::invalid_argument, msg.substr(0, msg.find(':')), msg};
        }
        c.kind = grammar::grammar_kind::ebnf;
        c.grammar = std::move(*ebnf);
        param = "tools";
    }
    if (!c.has_grammar()) return std::nullopt;
    auto compiled = engine.compile_grammar(c.kind, c.grammar);
    if (!compiled) {
        const auto& e = compiled.error();
        if (e.code != status::invalid_argument) return api_error{e.code, param, param + ": " + e.message};
        return field_error(param, e.message);
    }
    c.compiled = std::move(*compiled);
    return std::nullopt;
}

}  // namespace calserve::net
