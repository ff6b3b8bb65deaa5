#pragma once
//! The synchronous part of the HTTP request path, apart from the socket: the
//! request parser's limits, routing and the replies of the small routes, and the
//! admission of a generation body. The session (http_server.cpp) and generation
//! (generate_http.cpp) do the I/O around these; the fuzz targets (tests/fuzz/)
//! drive the same functions with no socket.
//!
//! Fault model: nothing a client sends makes these throw or abort; every bad
//! request becomes a reply with an OpenAI-shaped error.
#include <boost/beast/http/parser.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "net/server_impl.hpp"

namespace calserve::net {

inline constexpr std::size_t k_header_limit_bytes = 16 * 1024;  // request line + headers

// Applies the server's limits: k_header_limit_bytes and server.max_body_bytes (over it: 413).
inline void limit_request_parser(http::request_parser<http::string_body>& parser, const server_options& o) {
    parser.header_limit(k_header_limit_bytes);
    parser.body_limit(o.max_body_bytes);
}

// A finished answer of a small route or a refusal, built synchronously; one write sends it.
struct route_reply {
    unsigned status = 200;
    std::string body;
    std::string_view content_type = "application/json";
};

// Where a parsed request goes: a generation route (its kind; handle_generate answers
// it), or else `reply` answers it (small routes, 404, 405, 401).
struct routed {
    std::optional<api_kind> generate;
    route_reply reply;
};
routed route_request(http_server::impl& srv, const http_request& req);

// The response a reply becomes on the wire: status, headers (Retry-After on 429/503),
// keep-alive as the request asked, payload prepared.
http::response<http::string_body> make_response(const http_request& req, const server_options& o,
                                                unsigned status, std::string body, std::string_view content_type);

// A generation body (JSON text) -> an admitted request or the error to answer:
// JSON parse, then admit_request.
std::variant<api_request, api_error> admit_body(http_server::impl& srv, api_kind kind, std::string_view body,
                                                double& tokenize_s);

// WebSocket client messages through one fresh session (ws_session.cpp) without a
// socket: each message as the reader hands it to the session, then every event the
// session queued rendered as the writer would send it (client stalls not applied).
// Returns the server's messages in order.
std::vector<std::string> ws_replies(std::shared_ptr<http_server::impl> srv,
                                    const std::vector<std::string_view>& messages);

}  // namespace calserve::net
