#include "config/json_text.hpp"

#include <array>
#include <boost/json/serialize.hpp>
#include <charconv>
#include <cmath>

namespace calserve {
namespace json = boost::json;

namespace {
constexpr double k_fixed_min = 1e-5;   // smaller magnitudes use exponent form
constexpr double k_fixed_max = 1e16;   // as do these and larger (beyond exact integers)

void append_string(std::string& out, json::string_view s) { out += json::serialize(s); }

void append_array(std::string& out, const json::array& a) {
    out += '[';
    bool first = true;
    for (const auto& e : a) {
        if (!first) out += ',';
        first = false;
        append_json(out, e);
    }
    out += ']';
}

void append_object(std::string& out, const json::object& o) {
    out += '{';
    bool first = true;
    for (const auto& kv : o) {
        if (!first) out += ',';
        first = false;
        append_string(out, kv.key());
        out += ':';
        append_json(out, kv.value());
    }
    out += '}';
}
}  // namespace

void append_json_number(std::string& out, double d) {
    if (!std::isfinite(d)) {
        out += "null";
        return;
    }
    std::array<char, 64> buf{};
    const double mag = std::fabs(d);
    const auto fmt = (mag == 0 || (mag >= k_fixed_min && mag < k_fixed_max)) ? std::chars_format::fixed
                                                                               : std::chars_format::scientific;
    auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), d, fmt);
    if (ec != std::errc{}) {  // cannot happen with 64 bytes; keep the value readable anyway
        out += json::serialize(json::value(d));
        return;
    }
    if (d == 0 && std::signbit(d)) {  // "-0" reads back as an integer 0 in many decoders; keep the sign bit
        out += "-0.0";
        return;
    }
    out.append(buf.data(), end);
}

void append_json(std::string& out, const json::value& v) {
    switch (v.kind()) {
    case json::kind::double_: append_json_number(out, v.get_double()); return;
    case json::kind::string: append_string(out, v.get_string()); return;
    case json::kind::array: append_array(out, v.get_array()); return;
    case json::kind::object: append_object(out, v.get_object()); return;
    default: out += json::serialize(v); return;  // null, bool, int64, uint64
    }
}

std::string json_text(const json::value& v) {
    std::string out;
    append_json(out, v);
    return out;
}

std::string json_text(const json::object& o) {
    std::string out;
    append_object(out, o);
    return out;
}

std::string json_text(const json::array& a) {
    std::string out;
    append_array(out, a);
    return out;
}

}  // namespace calserve
