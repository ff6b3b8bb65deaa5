// python_json.hpp. Python's json encoder, for the values a JSON parser yields.
#include "model/tokenizer/python_json.hpp"

#include <boost/json.hpp>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace calserve::model {
namespace {

void put_string(std::string& out, std::string_view s) {
    out += '"';
    for (char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    static constexpr char hex[] = "0123456789abcdef";
                    out += "\\u00";
                    out += hex[(c >> 4) & 0xf];
                    out += hex[c & 0xf];
                } else {
                    out += c;
                }
        }
    }
    out += '"';
}

void put(std::string& out, const boost::json::value& v) {
    switch (v.kind()) {
        case boost::json::kind::null: out += "null"; break;
        case boost::json::kind::bool_: out += v.get_bool() ? "true" : "false"; break;
        case boost::json::kind::int64: out += std::to_string(v.get_int64()); break;
        case boost::json::kind::uint64: out += std::to_string(v.get_uint64()); break;
        case boost::json::kind::double_: out += python_float_repr(v.get_double()); break;
        case boost::json::kind::string: put_string(out, v.get_string()); break;
        case boost::json::kind::array: {
            out += '[';
            bool first = true;
            for (const auto& e : v.get_array()) {
                if (!first) out += ", ";
                first = false;
                put(out, e);
            }
            out += ']';
            break;
        }
        case boost::json::kind::object: {
            out += '{';
            bool first = true;
            for (const auto& kv : v.get_object()) {
                if (!first) out += ", ";
                first = false;
                put_string(out, kv.key());
                out += ": ";
                put(out, kv.value());
            }
            out += '}';
            break;
        }
    }
}

}  // namespace

// Python picks the shortest round-trip digits, then fixed notation when the
// decimal exponent is in [-4, 16), else d.ddde+XX with at least two exponent digits.
std::string python_float_repr(double d) {
    if (std::isnan(d)) return "NaN";
    if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string sci(buf, res.ptr);  // -d.ddde+XX
    std::string sign;
    if (sci.front() == '-') {
        sign = "-";
        sci.erase(0, 1);
    }
    auto e = sci.find('e');
    int exp10 = std::atoi(sci.c_str() + e + 1);
    std::string digits;
    for (std::size_t i = 0; i < e; ++i)
        if (sci[i] != '.') digits += sci[i];
    if (exp10 >= -4 && exp10 < 16) {
        std::string fixed;
        if (exp10 < 0) {
            fixed = "0." + std::string(static_cast<std::size_t>(-exp10 - 1), '0') + digits;
        } else {
            auto int_len = static_cast<std::size_t>(exp10) + 1;
            if (digits.size() <= int_len) {
                fixed = digits + std::string(int_len - digits.size(), '0') + ".0";
            } else {
                fixed = digits.substr(0, int_len) + "." + digits.substr(int_len);
            }
        }
        return sign + fixed;
    }
    std::string mant = digits.substr(0, 1);
    if (digits.size() > 1) mant += "." + digits.substr(1);
    std::string ex = std::to_string(std::abs(exp10));
    if (ex.size() < 2) ex = "0" + ex;
    return sign + mant + "e" + (exp10 < 0 ? "-" : "+") + ex;
}

std::string python_json_dumps(const boost::json::value& v) {
    std::string out;
    put(out, v);
    return out;
}

}  // namespace calserve::model
