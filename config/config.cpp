#include "config/config.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <cmath>
#include <sstream>

#include "config/invariant.hpp"
#include "config/json_text.hpp"
#include "config/read_file.hpp"

namespace calserve {
namespace json = boost::json;

std::string_view to_string(value_type t) {
    switch (t) {
        case value_type::integer: return "integer";
        case value_type::number: return "number";
        case value_type::boolean: return "boolean";
        case value_type::string: return "string";
    }
    return "?";
}

namespace {

std::string expectation(const key_spec& k) {
    std::string out{to_string(k.type)};
    if (k.type == value_type::integer || k.type == value_type::number) {
        std::ostringstream s;
        s << " in [" << k.min << ", " << k.max << "]";
        out += s.str();
    } else if (k.type == value_type::string && !k.allowed.empty()) {
        out += " one of " + std::string(k.allowed);
    }
    return out;
}

error_info reject(const key_spec& k, std::string_view got, std::string_view origin) {
    return make_error(status::invalid_argument, "config key '" + std::string(k.path) + "' (" +
                                                    std::string(origin) + "): expected " + expectation(k) +
                                                    ", got " + std::string(got));
}

bool allowed_string(const key_spec& k, std::string_view v) {
    if (k.allowed.empty()) return true;
    std::string_view rest = k.allowed;
    while (!rest.empty()) {
        auto bar = rest.find('|');
        if (rest.substr(0, bar) == v) return true;
        if (bar == std::string_view::npos) break;
        rest.remove_prefix(bar + 1);
    }
    return false;
}

result<config_value> check_range(const key_spec& k, config_value v, std::string_view got, std::string_view origin) {
    if (auto* i = std::get_if<std::int64_t>(&v)) {
        if (double(*i) < k.min || double(*i) > k.max) return reject(k, got, origin);
    } else if (auto* d = std::get_if<double>(&v)) {
        if (!std::isfinite(*d) || *d < k.min || *d > k.max) return reject(k, got, origin);
    } else if (auto* s = std::get_if<std::string>(&v)) {
        if (!allowed_string(k, *s)) return reject(k, got, origin);
    }
    return v;
}

// Text form as used by --set and the schema defaults.
result<config_value> parse_text(const key_spec& k, std::string_view text, std::string_view origin) {
    std::string got(1, '\'');  // built stepwise: GCC 12 warns falsely (-Wrestrict) on "'" + s
    got.append(text).push_back('\'');
    switch (k.type) {
        case value_type::integer: {
            std::int64_t v{};
            auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
            if (ec != std::errc{} || p != text.data() + text.size() || text.empty()) return reject(k, got, origin);
            return check_range(k, v, got, origin);
        }
        case value_type::number: {
            std::string s(text);
            char* end = nullptr;
            double v = std::strtod(s.c_str(), &end);
            if (s.empty() || end != s.c_str() + s.size()) return reject(k, got, origin);
            return check_range(k, v, got, origin);
        }
        case value_type::boolean:
            if (text == "true") return config_value{true};
            if (text == "false") return config_value{false};
            return reject(k, got, origin);
        case value_type::string: return check_range(k, std::string(text), got, origin);
    }
    return reject(k, got, origin);
}

std::string describe_json(const json::value& v) {
    std::string kind;
    switch (v.kind()) {
        case json::kind::null: kind = "null"; break;
        case json::kind::bool_: kind = "boolean"; break;
        case json::kind::int64:
        case json::kind::uint64: kind = "integer"; break;
        case json::kind::double_: kind = "number"; break;
        case json::kind::string: kind = "string"; break;
        case json::kind::array: kind = "array"; break;
        case json::kind::object: kind = "object"; break;
    }
    return kind + " " + json_text(v);
}

result<config_value> from_json(const key_spec& k, const json::value& v, std::string_view origin) {
    std::string got = describe_json(v);
    switch (k.type) {
        case value_type::integer:
            if (v.is_int64()) return check_range(k, v.as_int64(), got, origin);
            if (v.is_uint64() && v.as_uint64() <= INT64_MAX)
                return check_range(k, std::int64_t(v.as_uint64()), got, origin);
            if (v.is_double() && std::trunc(v.as_double()) == v.as_double() && std::abs(v.as_double()) < 9e15)
                return check_range(k, std::int64_t(v.as_double()), got, origin);
            return reject(k, got, origin);
        case value_type::number:
            if (v.is_number()) return check_range(k, v.to_number<double>(), got, origin);
            return reject(k, got, origin);
        case value_type::boolean:
            if (v.is_bool()) return config_value{v.as_bool()};
            return reject(k, got, origin);
        case value_type::string:
            if (v.is_string()) return check_range(k, std::string(v.as_string()), got, origin);
            return reject(k, got, origin);
    }
    return reject(k, got, origin);
}

// `section` (a.b) names the leading segments of the key `pattern` (a.b.c, a.*.c).
bool section_matches(std::string_view pattern, std::string_view section) {
    const auto segments = std::count(section.begin(), section.end(), '.') + 1;
    std::size_t end = 0;
    for (std::ptrdiff_t n = 0; n < segments; ++n) {
        end = pattern.find('.', n == 0 ? 0 : end + 1);
        if (end == std::string_view::npos) return false;  // the section would be the whole key
    }
    return key_matches(pattern.substr(0, end), section);
}

void_result merge_object(std::map<std::string, config_value, std::less<>>& values, const json::object& obj,
                         const std::string& prefix, std::string_view origin) {
    for (const auto& [key, v] : obj) {
        std::string path = prefix.empty() ? std::string(key) : prefix + "." + std::string(key);
        if (v.is_object()) {
            // A section: recurse; it must be a prefix of some known key.
            bool known_section = false;
            for (const auto& k : config_schema())
                if (section_matches(k.path, path)) known_section = true;
            if (!known_section)
                return make_error(status::invalid_argument,
                                  "unknown config key '" + path + "' (" + std::string(origin) + ")");
            if (auto r = merge_object(values, v.as_object(), path, origin); !r) return r;
            continue;
        }
        const key_spec* spec = find_key(path);
        if (!spec)
            return make_error(status::invalid_argument, "unknown config key '" + path + "' (" + std::string(origin) + ")");
        auto parsed = from_json(*spec, v, origin);
        if (!parsed) return parsed.error();
        values[path] = std::move(parsed.value());
    }
    return {};
}

void insert_nested(json::object& root, std::string_view path, json::value v) {
    json::object* node = &root;
    while (true) {
        auto dot = path.find('.');
        if (dot == std::string_view::npos) {
            (*node)[path] = std::move(v);
            return;
        }
        auto& child = (*node)[path.substr(0, dot)];
        if (!child.is_object()) child = json::object{};
        node = &child.as_object();
        path.remove_prefix(dot + 1);
    }
}

void pretty(std::ostream& os, const json::value& v, int indent) {
    std::string pad(indent * 2, ' ');
    if (v.is_object() && !v.as_object().empty()) {
        os << "{\n";
        bool first = true;
        for (const auto& [key, child] : v.as_object()) {
            if (!first) os << ",\n";
            first = false;
            os << pad << "  " << json::serialize(json::value(key)) << ": ";
            pretty(os, child, indent + 1);
        }
        os << "\n" << pad << "}";
    } else {
        os << json_text(v);
    }
}

}  // namespace

config config::defaults() {
    config c;
    for (const auto& k : config_schema()) {
        if (is_pattern(k)) continue;
        auto v = parse_text(k, k.default_text, "default");
        CALSERVE_INVARIANT(v.ok(), "schema default invalid for " + std::string(k.path));
        c.values_[std::string(k.path)] = std::move(v.value());
    }
    return c;
}

void_result config::merge_json(std::string_view json_text, std::string_view origin) {
    boost::system::error_code ec;
    json::value doc = json::parse(json_text, ec);
    if (ec) return make_error(status::invalid_argument, std::string(origin) + ": not valid JSON: " + ec.message());
    return merge_document(doc, origin);
}

void_result config::merge_document(const boost::json::value& doc, std::string_view origin) {
    if (!doc.is_object()) return make_error(status::invalid_argument, std::string(origin) + ": top level must be an object");
    return merge_object(values_, doc.as_object(), "", origin);
}

void_result config::set(std::string_view assignment) {
    auto eq = assignment.find('=');
    if (eq == std::string_view::npos || eq == 0)
        return make_error(status::invalid_argument, "--set expects key.path=value, got '" + std::string(assignment) + "'");
    return set(assignment.substr(0, eq), assignment.substr(eq + 1));
}

void_result config::set(std::string_view path, std::string_view value_text) {
    const key_spec* spec = find_key(path);
    if (!spec) return make_error(status::invalid_argument, "unknown config key '" + std::string(path) + "' (--set)");
    auto v = parse_text(*spec, value_text, "--set");
    if (!v) return v.error();
    values_[std::string(path)] = std::move(v.value());
    return {};
}

result<config> config::load(const std::optional<std::filesystem::path>& file, const std::vector<std::string>& overrides) {
    config c = defaults();
    if (file) {
        auto doc = read_json_file(*file);  // its errors name the file
        if (!doc) return make_error(status::invalid_argument, "config: " + doc.error().message);
        if (auto r = c.merge_document(*doc, file->string()); !r) return r.error();
    }
    for (const auto& o : overrides)
        if (auto r = c.set(o); !r) return r.error();
    return c;
}

const config_value& config::at(std::string_view path) const {
    auto it = values_.find(path);
    CALSERVE_INVARIANT(it != values_.end(), "config key not in schema: " + std::string(path));
    return it->second;
}

std::int64_t config::integer(std::string_view path) const {
    auto* v = std::get_if<std::int64_t>(&at(path));
    CALSERVE_INVARIANT(v, "config key is not an integer: " + std::string(path));
    return *v;
}
double config::number(std::string_view path) const {
    const auto& v = at(path);
    if (auto* i = std::get_if<std::int64_t>(&v)) return double(*i);
    auto* d = std::get_if<double>(&v);
    CALSERVE_INVARIANT(d, "config key is not a number: " + std::string(path));
    return *d;
}
bool config::boolean(std::string_view path) const {
    auto* v = std::get_if<bool>(&at(path));
    CALSERVE_INVARIANT(v, "config key is not a boolean: " + std::string(path));
    return *v;
}
const std::string& config::string(std::string_view path) const {
    auto* v = std::get_if<std::string>(&at(path));
    CALSERVE_INVARIANT(v, "config key is not a string: " + std::string(path));
    return *v;
}

std::optional<std::string> config::find_string(std::string_view path) const {
    auto it = values_.find(path);
    if (it == values_.end()) return std::nullopt;
    if (auto* s = std::get_if<std::string>(&it->second)) return *s;
    return std::nullopt;
}

std::string config::to_json() const {
    json::object root;
    // Schema order; then the values of pattern keys (models.NAME.chips) that were set.
    std::vector<std::pair<std::string_view, const config_value*>> ordered;
    for (const auto& k : config_schema())
        if (!is_pattern(k)) ordered.emplace_back(k.path, &at(k.path));
    for (const auto& [path, value] : values_) {
        const auto* spec = find_key(path);
        if (spec && is_pattern(*spec)) ordered.emplace_back(path, &value);
    }
    for (const auto& [path, vp] : ordered) {
        const auto& v = *vp;
        json::value jv = std::visit([](const auto& x) -> json::value { return json::value(x); }, v);
        insert_nested(root, path, std::move(jv));
    }
    std::ostringstream os;
    pretty(os, root, 0);
    os << "\n";
    return os.str();
}

}  // namespace calserve
