// JSON Schema (OpenAI strict-mode subset) -> EBNF. One rule per schema node, named s<N>;
// the output is compact JSON (no whitespace outside strings) with object keys in schema
// order, so sentences are short and most tokens are decided per position. A node the
// engine cannot honour exactly is refused with its JSON pointer, never approximated
// loosely: every sentence of the grammar validates against the schema.
#include <boost/json.hpp>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "model/grammar/grammar.hpp"
#include "model/grammar/compiled.hpp"
#include "model/grammar/schema_internal.hpp"

namespace calserve::model::grammar {
namespace {

namespace json = boost::json;

// Common rules, emitted once when used. A string body is one self-recursive rule so that
// its characters never end a rule (few context-dependent tokens); \u escapes exclude
// surrogates so every sentence decodes to valid Unicode.
const std::map<std::string, std::string, std::less<>>& common_rules() {
    static const std::map<std::string, std::string, std::less<>> rules = {
        {"string", "string ::= \"\\\"\" string-tail\n"
                   "string-tail ::= [^\"\\\\\\x00-\\x1F] string-tail | \"\\\\\" [\"\\\\/bfnrt] string-tail | "
                   "\"\\\\u\" unicode-escape string-tail | \"\\\"\"\n"},
        {"unicode-escape", "unicode-escape ::= [0-9a-cA-CefEF] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] | "
                           "[dD] [0-7] [0-9a-fA-F] [0-9a-fA-F]\n"},
        {"integer", "integer ::= \"-\"? (\"0\" | [1-9] [0-9]*)\n"},
        {"number", "number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?\n"},
        {"boolean", "boolean ::= \"true\" | \"false\"\n"},
        {"null", "null ::= \"null\"\n"},
        {"value", "value ::= object | array | string | number | boolean | null\n"},
        {"object", "object ::= \"{\" (string \":\" value (\",\" string \":\" value)*)? \"}\"\n"},
        {"array", "array ::= \"[\" (value (\",\" value)*)? \"]\"\n"},
    };
    return rules;
}

const std::map<std::string, std::vector<std::string>, std::less<>>& common_deps() {
    static const std::map<std::string, std::vector<std::string>, std::less<>> deps = {
        {"string", {"unicode-escape"}},
        {"value", {"object", "array", "string", "number", "boolean", "null"}},
        {"object", {"string", "value"}},
        {"array", {"value"}},
    };
    return deps;
}

const std::set<std::string, std::less<>>& known_keywords() {
    static const std::set<std::string, std::less<>> k = {
        "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum",
        "const", "anyOf", "$ref", "$defs", "definitions", "minLength", "maxLength", "pattern", "minimum",
        "maximum", "exclusiveMinimum", "exclusiveMaximum", "title", "description", "default", "examples",
        "$schema", "$id", "$comment", "format", "strict", "name"};
    return k;
}

const std::set<std::string, std::less<>>& annotation_keywords() {
    static const std::set<std::string, std::less<>> k = {"title", "description", "default", "examples", "$schema",
                                                          "$id", "$comment", "format", "strict", "name",
                                                          "$defs", "definitions"};
    return k;
}

std::string pointer_token(std::string_view key) {
    std::string out;
    for (const char c : key) {
        if (c == '~') out += "~0";
        else if (c == '/') out += "~1";
        else out += c;
    }
    return out;
}

constexpr std::size_t k_max_schema_depth = 64;

class converter {
public:
    explicit converter(const json::value& root) : root_(root) {}

    result<std::string> run() {
        const std::string top = visit(root_, "");
        if (err_) return *err_;
        std::string text = "root ::= " + top + "\n" + rules_;
        for (const auto& name : common_) text += common_rules().find(name)->second;
        return text;
    }

private:
    static std::string where(const std::string& path) { return path.empty() ? "(root)" : path; }
    void fail(const std::string& path, const std::string& what) {
        if (!err_) err_ = make_error(status::invalid_argument, where(path) + ": " + what);
    }
    std::string use(const std::string& name) {
        if (common_.insert(name).second) {
            if (auto it = common_deps().find(name); it != common_deps().end()) {
                for (const auto& d : it->second) use(d);
            }
        }
        return name;
    }
    std::string define(const std::string& path, const std::string& body) {
        std::string name = rule_name();
        rules_ += name + " ::= " + body + "\n";
        paths_[name] = path;
        return name;
    }
    std::string rule_name() {
        std::string name(1, 's');
        name += std::to_string(++count_);
        return name;
    }
    std::string reserve(const std::string& path) {
        std::string name = rule_name();
        paths_[name] = path;
        return name;
    }

    std::string visit(const json::value& s, const std::string& path) {
        if (err_) return "null";
        if (depth_ >= k_max_schema_depth) {
            fail(path, "schema nested too deeply");
            return "null";
        }
        ++depth_;
        std::string out = visit_node(s, path);
        --depth_;
        return out;
    }

    std::string visit_node(const json::value& s, const std::string& path) {
        if (s.is_bool()) {
            if (s.as_bool()) return use("value");
            fail(path, "schema 'false' matches nothing");
            return "null";
        }
        if (!s.is_object()) {
            fail(path, "a schema must be an object");
            return "null";
        }
        const json::object& o = s.as_object();
        for (const auto& kv : o) {
            if (!known_keywords().contains(kv.key())) fail(path, "unsupported keyword '" + std::string(kv.key()) + "'");
        }
        if (err_) return "null";
        if (const auto* ref = o.if_contains("$ref")) return reference(o, *ref, path);
        if (const auto* e = o.if_contains("enum")) return enumeration(*e, path);
        if (const auto* c = o.if_contains("const")) return define(path, literal(json::serialize(*c)));
        if (const auto* any = o.if_contains("anyOf")) return any_of(*any, path);
        const json::value* type = o.if_contains("type");
        if (type == nullptr) {
            if (o.contains("properties")) return object_rule(o, path);
            return use("value");
        }
        if (type->is_string()) return typed(o, type->as_string(), path);
        if (!type->is_array() || type->as_array().empty()) {
            fail(path + "/type", "must be a type name or a non-empty array of them");
            return "null";
        }
        std::string body;
        for (const auto& t : type->as_array()) {
            if (!t.is_string()) fail(path + "/type", "must be a type name or a non-empty array of them");
            if (err_) return "null";
            body += (body.empty() ? "" : " | ") + typed(o, t.as_string(), path);
        }
        return define(path, body);
    }

    std::string typed(const json::object& o, std::string_view type, const std::string& path) {
        if (type == "string") return string_rule(o, path);
        if (type == "integer") return integer_rule(o, path);
        if (type == "number") {
            for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
                if (o.contains(k)) fail(path, std::string("unsupported keyword '") + k + "' for type number");
            }
            return use("number");
        }
        if (type == "boolean") return use("boolean");
        if (type == "null") return use("null");
        if (type == "object") return object_rule(o, path);
        if (type == "array") return array_rule(o, path);
        fail(path + "/type", "unknown type '" + std::string(type) + "'");
        return "null";
    }

    std::string reference(const json::object& o, const json::value& ref, const std::string& path) {
        for (const auto& kv : o) {
            if (kv.key() != "$ref" && !annotation_keywords().contains(kv.key())) {
                fail(path, "keyword '" + std::string(kv.key()) + "' beside '$ref' is not supported");
            }
        }
        if (!ref.is_string() || ref.as_string().empty() || ref.as_string()[0] != '#') {
            fail(path + "/$ref", "only local references ('#...') are supported");
            return "null";
        }
        const std::string target(ref.as_string().subview(1));
        if (auto it = refs_.find(target); it != refs_.end()) return it->second;
        boost::system::error_code ec;
        const json::value* node = root_.find_pointer(target, ec);
        if (node == nullptr) {
            fail(path + "/$ref", "unresolved reference '" + std::string(ref.as_string()) + "'");
            return "null";
        }
        const std::string name = reserve(target);
        refs_.emplace(target, name);
        const std::string body = visit(*node, target);
        rules_ += name + " ::= " + body + "\n";
        return name;
    }

    std::string enumeration(const json::value& e, const std::string& path) {
        if (!e.is_array() || e.as_array().empty()) {
            fail(path + "/enum", "must be a non-empty array");
            return "null";
        }
        std::string body;
        for (const auto& v : e.as_array()) body += (body.empty() ? "" : " | ") + literal(json::serialize(v));
        return define(path, body);
    }

    std::string any_of(const json::value& any, const std::string& path) {
        if (!any.is_array() || any.as_array().empty()) {
            fail(path + "/anyOf", "must be a non-empty array");
            return "null";
        }
        std::string body;
        std::size_t i = 0;
        for (const auto& sub : any.as_array()) {
            body += (body.empty() ? "" : " | ") + visit(sub, path + "/anyOf/" + std::to_string(i++));
        }
        return define(path, body);
    }

    std::optional<std::size_t> count(const json::object& o, const char* key, const std::string& path) {
        const json::value* v = o.if_contains(key);
        if (v == nullptr) return std::nullopt;
        const auto n = v->is_int64() ? v->as_int64() : v->is_uint64() ? static_cast<std::int64_t>(v->as_uint64()) : -1;
        if (n < 0 || static_cast<std::uint64_t>(n) > k_max_repetition) {
            fail(path + "/" + key, "must be an integer in [0, " + std::to_string(k_max_repetition) + "]");
            return std::nullopt;
        }
        return static_cast<std::size_t>(n);
    }

    // "{lo,hi}", or "{lo,}" when hi is k_unbounded.
    static std::string bounds(std::size_t lo, std::size_t hi) {
        std::string out(1, '{');
        out += std::to_string(lo);
        out += ',';
        if (hi != k_unbounded) out += std::to_string(hi);
        out += '}';
        return out;
    }
    static constexpr std::size_t k_unbounded = ~std::size_t{0};

    std::string string_rule(const json::object& o, const std::string& path) {
        const auto lo = count(o, "minLength", path);
        const auto hi = count(o, "maxLength", path);
        if (const auto* p = o.if_contains("pattern")) {
            if (lo || hi) fail(path, "'pattern' together with a length bound is not supported");
            if (!p->is_string()) fail(path + "/pattern", "must be a string");
            if (err_) return "null";
            auto body = detail::pattern_to_ebnf(p->as_string());
            if (!body) {
                fail(path + "/pattern", body.error().message);
                return "null";
            }
            return define(path, "\"\\\"\" " + *body + " \"\\\"\"");
        }
        if (!lo && !hi) return use("string");
        if (lo && hi && *hi < *lo) fail(path, "maxLength < minLength");
        use("unicode-escape");
        const std::string ch =
            "([^\"\\\\\\x00-\\x1F] | \"\\\\\" [\"\\\\/bfnrt] | \"\\\\u\" unicode-escape)";
        return define(path, "\"\\\"\" " + ch + bounds(lo.value_or(0), hi.value_or(k_unbounded)) + " \"\\\"\"");
    }

    std::string integer_rule(const json::object& o, const std::string& path) {
        std::optional<std::int64_t> lo;
        std::optional<std::int64_t> hi;
        auto bound = [&](const char* key, bool upper, std::int64_t shift) {
            const json::value* v = o.if_contains(key);
            if (v == nullptr) return;
            if (!v->is_number()) return fail(path + "/" + key, "must be a number");
            const double d = v->to_number<double>();
            if (std::fabs(d) > 1e15) return fail(path + "/" + key, "bound too large");
            const auto b = static_cast<std::int64_t>(upper ? std::floor(d) : std::ceil(d)) + shift;
            if (upper) hi = hi ? std::min(*hi, b) : b;
            else lo = lo ? std::max(*lo, b) : b;
        };
        bound("minimum", false, 0);
        bound("maximum", true, 0);
        bound("exclusiveMinimum", false, 0);  // adjusted below when the bound is an integer
        bound("exclusiveMaximum", true, 0);
        for (const auto& [key, upper] : {std::pair{"exclusiveMinimum", false}, std::pair{"exclusiveMaximum", true}}) {
            const json::value* v = o.if_contains(key);
            if (v == nullptr || !v->is_number()) continue;
            const double d = v->to_number<double>();
            if (d == std::floor(d)) {
                const auto b = static_cast<std::int64_t>(d);
                if (upper && hi && *hi == b) --*hi;
                if (!upper && lo && *lo == b) ++*lo;
            }
        }
        if (err_) return "null";
        if (!lo && !hi) return use("integer");
        if (lo && hi && *lo > *hi) {
            fail(path, "no integer satisfies the bounds");
            return "null";
        }
        return define(path, detail::integer_range_ebnf(lo, hi));
    }

    std::string array_rule(const json::object& o, const std::string& path) {
        const json::value* items = o.if_contains("items");
        const std::string item = items != nullptr ? visit(*items, path + "/items") : use("value");
        const std::size_t lo = count(o, "minItems", path).value_or(0);
        const auto hi = count(o, "maxItems", path);
        if (err_) return "null";
        if (hi && *hi < lo) {
            fail(path, "maxItems < minItems");
            return "null";
        }
        if (hi && *hi == 0) return define(path, "\"[]\"");
        const std::size_t more_hi = hi ? *hi - 1 : k_unbounded;
        if (lo == 0) return define(path, "\"[\" (" + item + " (\",\" " + item + ")" + bounds(0, more_hi) + ")? \"]\"");
        return define(path, "\"[\" " + item + " (\",\" " + item + ")" + bounds(lo - 1, more_hi) + " \"]\"");
    }

    std::string object_rule(const json::object& o, const std::string& path) {
        const json::value* props = o.if_contains("properties");
        const json::value* extra = o.if_contains("additionalProperties");
        if (props != nullptr && !props->is_object()) fail(path + "/properties", "must be an object");
        const bool has_props = props != nullptr && props->is_object() && !props->as_object().empty();
        if (err_) return "null";
        if (!has_props) {
            if (extra == nullptr || (extra->is_bool() && !extra->as_bool())) return define(path, "\"{}\"");
            const std::string v = extra->is_bool() ? use("value") : visit(*extra, path + "/additionalProperties");
            use("string");
            return define(path, "\"{\" (string \":\" " + v + " (\",\" string \":\" " + v + ")*)? \"}\"");
        }
        if (extra != nullptr && !(extra->is_bool() && !extra->as_bool())) {
            fail(path + "/additionalProperties", "must be false when 'properties' are given");
            return "null";
        }
        std::set<std::string, std::less<>> required;
        if (const auto* req = o.if_contains("required")) {
            if (!req->is_array()) fail(path + "/required", "must be an array of names");
            else for (const auto& r : req->as_array()) {
                if (r.is_string()) required.insert(std::string(r.as_string()));
                else fail(path + "/required", "must be an array of names");
            }
        }
        std::vector<std::pair<std::string, bool>> members;  // "key":value, required
        for (const auto& kv : props->as_object()) {
            const std::string value = visit(kv.value(), path + "/properties/" + pointer_token(kv.key()));
            members.emplace_back(literal(json::serialize(json::string(kv.key())) + ":") + " " + value,
                                 required.contains(kv.key()));
        }
        for (const auto& r : required) {
            if (!props->as_object().contains(r)) fail(path + "/required", "names '" + r + "', which is not a property");
        }
        if (err_) return "null";
        return define(path, "\"{\" " + members_rule(members, path) + " \"}\"");
    }

    // The members in order; an optional one may be absent. rest(i, comma) is a rule per
    // (i, comma) so that k optional members cost O(k) rules, not 2^k alternatives.
    std::string members_rule(const std::vector<std::pair<std::string, bool>>& m, const std::string& path) {
        std::map<std::pair<std::size_t, bool>, std::string> memo;
        std::function<std::string(std::size_t, bool)> rest = [&](std::size_t i, bool comma) -> std::string {
            if (i == m.size()) return "";
            if (auto it = memo.find({i, comma}); it != memo.end()) return it->second;
            const std::string here = (comma ? "\",\" " : "") + m[i].first + " " + rest(i + 1, true);
            std::string out = here;
            if (!m[i].second) {
                const std::string skip = rest(i + 1, comma);
                out = define(path, here + " | " + skip);
            }
            memo.emplace(std::pair{i, comma}, out);
            return out;
        };
        return rest(0, false);
    }

    static std::string literal(std::string_view bytes) {
        std::string out = "\"";
        for (const char c : bytes) {
            if (c == '"' || c == '\\') out += '\\';
            out += c;
        }
        return out + "\"";
    }

    const json::value& root_;
    std::string rules_;
    std::set<std::string> common_;
    std::map<std::string, std::string> refs_;   // pointer -> rule
    std::map<std::string, std::string> paths_;  // rule -> pointer
    std::size_t count_ = 0;
    std::size_t depth_ = 0;  // visit recursion ($ref chains included)
    std::optional<error_info> err_;

public:
    // A rule the compiler found unable to finish -> the schema node it came from.
    std::string path_of(const std::string& rule) const {
        auto it = paths_.find(rule);
        return it == paths_.end() ? std::string() : where(it->second);
    }
};

}  // namespace

result<std::string> json_schema_to_ebnf(std::string_view schema_json) {
    boost::system::error_code ec;
    json::value schema = json::parse(schema_json, ec);
    if (ec) return make_error(status::invalid_argument, "(root): schema is not JSON: " + ec.message());
    converter conv(schema);
    auto text = conv.run();
    if (!text) return text;
    auto checked = detail::parse_ebnf(*text);
    if (!checked) {
        const std::string& msg = checked.error().message;
        const auto a = msg.find("rule '");
        if (msg.find("can never finish") != std::string::npos && a != std::string::npos) {
            const auto b = msg.find('\'', a + 6);
            const std::string at = conv.path_of(msg.substr(a + 6, b - a - 6));
            return make_error(status::invalid_argument, at + ": recursion without a base case");
        }
        return make_error(status::invalid_argument, "(root): " + msg);
    }
    return text;
}

std::string json_object_ebnf() {
    std::string text = "root ::= object\n";
    for (const char* name : {"object", "value", "array", "string", "unicode-escape", "number", "boolean", "null"}) {
        text += common_rules().find(name)->second;
    }
    return text;
}

}  // namespace calserve::model::grammar
