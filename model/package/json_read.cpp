#include "model/package/json_read.hpp"

#include <charconv>
#include <cstdio>

namespace calserve::model::package {

namespace json = boost::json;

namespace {
std::string join(std::string_view path, std::string_view key) {
    std::string out{path};
    out += '.';
    out += key;
    return out;
}
}  // namespace

std::optional<std::uint64_t> parse_unsigned(std::string_view text) {
    int base = 10;
    if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
        text.remove_prefix(2);
        base = 16;
    }
    if (text.empty()) return std::nullopt;
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v, base);
    if (ec != std::errc{} || p != text.data() + text.size()) return std::nullopt;
    return v;
}

std::string to_hex(std::uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
}

const json::object* json_reader::object(const json::value& v, std::string_view path) {
    if (const auto* o = v.if_object()) return o;
    fail(std::string(path) + ": expected an object");
    return nullptr;
}

const json::object* json_reader::object(const json::object& o, std::string_view key, std::string_view path) {
    const auto* v = o.if_contains(key);
    if (!v) {
        fail(join(path, key) + ": missing");
        return nullptr;
    }
    return object(*v, join(path, key));
}

const json::array* json_reader::array(const json::object& o, std::string_view key, std::string_view path) {
    const auto* v = o.if_contains(key);
    if (!v || !v->is_array()) {
        fail(join(path, key) + (v ? ": expected an array" : ": missing"));
        return nullptr;
    }
    return &v->get_array();
}

std::optional<std::string> json_reader::string(const json::object& o, std::string_view key, std::string_view path) {
    const auto* v = o.if_contains(key);
    if (!v || !v->is_string()) {
        fail(join(path, key) + (v ? ": expected a string" : ": missing"));
        return std::nullopt;
    }
    return std::string(v->get_string());
}

std::optional<std::int64_t> json_reader::i64(const json::value& v, std::string_view path) {
    if (v.is_int64()) return v.get_int64();
    if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
        return static_cast<std::int64_t>(v.get_uint64());
    fail(std::string(path) + ": expected an integer");
    return std::nullopt;
}

std::optional<std::uint64_t> json_reader::u64(const json::object& o, std::string_view key, std::string_view path) {
    const auto* v = o.if_contains(key);
    if (!v) {
        fail(join(path, key) + ": missing");
        return std::nullopt;
    }
    if (v->is_uint64()) return v->get_uint64();
    if (v->is_int64() && v->get_int64() >= 0) return static_cast<std::uint64_t>(v->get_int64());
    fail(join(path, key) + ": expected a non-negative integer");
    return std::nullopt;
}

std::optional<std::uint64_t> json_reader::address(const json::object& o, std::string_view key, std::string_view path) {
    const auto* v = o.if_contains(key);
    if (v && v->is_string()) {
        if (auto a = parse_unsigned(v->get_string())) return a;
        fail(join(path, key) + ": malformed address");
        return std::nullopt;
    }
    return u64(o, key, path);
}

std::optional<bool> json_reader::boolean(const json::object& o, std::string_view key, std::string_view path) {
    const auto* v = o.if_contains(key);
    if (!v || !v->is_bool()) {
        fail(join(path, key) + (v ? ": expected a boolean" : ": missing"));
        return std::nullopt;
    }
    return v->get_bool();
}

}  // namespace calserve::model::package
