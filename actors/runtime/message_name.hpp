#pragma once
//! Compile-time type name of a message struct, for tracing (no RTTI, stable
//! across runs of one binary): "calserve::actors::kv_reserve" -> "kv_reserve".
#include <string_view>

namespace calserve::actors {

template <class T>
constexpr std::string_view message_name() {
    std::string_view f = __PRETTY_FUNCTION__;  // "... message_name() [with T = ns::type; ...]"
    auto start = f.find("T = ");
    if (start == std::string_view::npos) return "message";
    start += 4;
    auto end = f.find_first_of(";]", start);
    std::string_view full = f.substr(start, end - start);
    auto colon = full.rfind("::", full.find('<'));
    return colon == std::string_view::npos ? full : full.substr(colon + 2);
}

}  // namespace calserve::actors
