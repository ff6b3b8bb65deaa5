// The one translation unit that compiles Boost.Asio and Boost.Beast
// (separate compilation: every other file includes only their headers).
//
// Builds with assertions (Debug, the sanitizer and fuzz builds) route this unit's
// Boost assertions through the handler below, which fails like `assert` for every
// assertion but one: Boost 1.81's Beast asserts `n >= 5` in
// basic_parser::parse_chunk_header, yet the code after it handles the 3 or 4 bytes
// of a last chunk (`0\r\n`) whose trailer has not arrived and asks for more. Beast
// dropped that assertion upstream (boostorg/beast pull request 2861, Boost 1.86);
// found by fuzz_http_request (docs/fuzzing.md). Release builds (NDEBUG) assert nothing.
#ifndef NDEBUG
#define BOOST_ENABLE_ASSERT_HANDLER
#include <boost/assert.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace boost {
void assertion_failed_msg(char const* expr, char const* msg, char const* function, char const* file, long line) {
    if (std::strcmp(expr, "n >= 5") == 0 && std::strstr(file, "beast/http/impl/basic_parser.ipp") != nullptr) return;
    std::fprintf(stderr, "%s:%ld: %s: Assertion '%s' failed%s%s\n", file, line, function, expr, msg ? ": " : "",
                 msg ? msg : "");
    std::abort();
}
void assertion_failed(char const* expr, char const* function, char const* file, long line) {
    assertion_failed_msg(expr, nullptr, function, file, line);
}
}  // namespace boost
#endif

#include <boost/asio/impl/src.hpp>
#include <boost/beast/src.hpp>
