#pragma once
//! The synchronous part of the HTTP request path, apart from the socket: the
//! request parser's limits, the refusals of what the parser or the session turns
//! away (413, 431, 400, the WebSocket handshake checks), routing and the replies of
//! the small routes, and the admission of a generation body. The session
//! (http_session.cpp) and generation (generate_http.cpp, on the tokenize pool) do
//! the I/O around these; the fuzz targets (tests/fuzz/) drive the same functions
//! with no socket.
//!
//! Fault model: nothing a client sends makes these throw or abort; every bad
//! request becomes a reply with an OpenAI-shaped error.
#include <boost/beast/http/parser.hpp>
#include <optional>
#include <utility>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "net/server_impl.hpp"

namespace calserve::net {

inline constexpr std::size_t k_header_limit_bytes = 16 * 1024;  // request line + headers

// Applies the server's limits: k_header_limit_bytes (over it: 431) and server.max_body_bytes (413).
inline void limit_request_parser(http::request_parser<http::string_body>& parser, const server_options& o) {
    parser.header_limit(k_header_limit_bytes);
    parser.body_limit(o.max_body_bytes);
}

// The answer to bytes the request parser refused (413 body over max_body_bytes, 431
// request line and headers over k_header_limit_bytes, 400 malformed HTTP), or nullopt
// when the connection just ended (EOF before or inside a request, a timeout, a reset):
// nobody is there to answer. The session closes (lingering) after answering.
std::optional<api_error> parse_refusal(const beast::error_code& ec, const server_options& o);

// A parsed head the session refuses before routing: HTTP/1.1 without Host (400).
std::optional<api_error> head_refusal(const http_request& head);

// /v1/ws: the Origin (403), Beast's handshake checks answered in the API's shape (426 not an upgrade
// or a wrong Sec-WebSocket-Version, 400 a bad key), then the API key (401); with the
// headers the answer carries. nullopt: the upgrade goes ahead.
std::optional<std::pair<api_error, headers_list>> ws_refusal(const http_server::impl& srv, const http_request& req);

// The response a refusal becomes: HTTP/1.0 or 1.1 as asked, Connection: close, the
// JSON error, Retry-After where the status has one, `extra` headers.
http::response<http::string_body> make_refusal(const server_options& o, unsigned version, const api_error& e,
                                               const headers_list& extra);

// A finished answer of a small route or a refusal, built synchronously; one write sends it.
struct route_reply {
    unsigned status = 200;
    std::string body;
    std::string_view content_type = "application/json";
    headers_list headers = {};  // besides those make_response sets (a preflight's Access-Control-*)
};

// Where a parsed request goes: a generation route (its kind; handle_generate answers
// it), or else `reply` answers it (small routes, 404, 405, 401). HEAD takes the GET route.
// Before routing: a refused browser Origin is a 403 and OPTIONS a CORS preflight
// (204); after it, a POST body declared other than JSON is a 415 (net/origin_policy.hpp).
struct routed {
    std::optional<api_kind> generate;
    route_reply reply;
};
routed route_request(http_server::impl& srv, const http_request& req);

// The response a reply becomes on the wire: status, headers (Retry-After on 429/503),
// keep-alive as the request asked, payload prepared. A HEAD request gets its header
// only (send_response writes no body).
http::response<http::string_body> make_response(const http_request& req, const server_options& o,
                                                unsigned status, std::string body, std::string_view content_type,
                                                const headers_list& extra = {});

// The 403 of a request whose browser Origin is not allowed (HTTP and the WebSocket upgrade).
std::optional<api_error> origin_refusal(const http_server::impl& srv, const http_request& req);

// A generation body (JSON text) -> an admitted request or the error to answer:
// JSON parse, then admit_request. handle_generate runs it on the tokenize pool.
std::variant<api_request, api_error> admit_body(http_server::impl& srv, api_kind kind, std::string_view body,
                                                double& tokenize_s);

// WebSocket client messages through one fresh session (ws_session.cpp) without a
// socket: each message as the reader hands it to the session (generate admission on
// the tokenize pool), then every event the session queued rendered as the writer
// would send it, its bytes released (client stalls not applied). Runs srv->ioc
// until done, so call it only where nothing else runs that io_context. Returns the
// server's messages in order.
std::vector<std::string> ws_replies(std::shared_ptr<http_server::impl> srv,
                                    const std::vector<std::string_view>& messages);

}  // namespace calserve::net
