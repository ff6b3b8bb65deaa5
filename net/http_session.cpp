// One HTTP connection: reading requests (header timeout, then body), protocol
// refusals with a JSON body, `Expect: 100-continue`, the WebSocket upgrade, and
// the lingering close after an answer to a request that was not read to its end.
//
// Why lingering: a client uploading a body we refuse (413) is still writing when
// the answer is sent; closing the socket with its unread bytes makes the kernel
// send a reset, which destroys the answer in the client's receive queue and breaks
// its upload ("Broken pipe"). So the write side is shut first (the client sees the
// answer and then EOF) and its input is read and dropped, bounded by
// server.linger_ms and server.linger_bytes, before the socket is closed.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <chrono>

#include "net/request_path.hpp"

namespace calserve::net {

namespace {
constexpr std::size_t k_first_read = 4096;          // the first read of a kept-alive request
constexpr std::size_t k_linger_chunk = 64 * 1024;   // one read of input dropped while lingering
constexpr std::size_t k_ws_key_size = 24;           // base64 of the 16-byte Sec-WebSocket-Key
using asio::use_awaitable;

// What the session does after one exchange.
enum class after : std::uint8_t { keep, close, linger };

struct session_state {
    bool first = true;      // no request read yet: the header timeout runs from accept
    bool overflow = false;  // over max_connections: /health and /ready only, one answer
    bool upgraded = false;  // the connection became a WebSocket
};

double unix_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

api_error with_http_status(api_error e, unsigned http_status) {
    e.http_status = http_status;
    return e;
}

}  // namespace

std::optional<api_error> parse_refusal(const beast::error_code& ec, const server_options& o) {
    if (ec == http::error::body_limit) {
        return field_error(
            "body", "larger than server.max_body_bytes (" + std::to_string(o.max_body_bytes) + " bytes)",
            status::payload_too_large);
    }
    if (ec == http::error::header_limit) {
        return with_http_status(
            api_error{status::invalid_argument, {},
                      "request line and headers larger than " + std::to_string(k_header_limit_bytes) + " bytes"},
            431);
    }
    if (ec.category() != http::make_error_code(http::error::bad_method).category()) return std::nullopt;
    if (ec == http::error::end_of_stream || ec == http::error::partial_message) return std::nullopt;
    return api_error{status::parse_error, {}, "malformed HTTP request: " + ec.message()};
}

http::response<http::string_body> make_refusal(const server_options& o, unsigned version, const api_error& e,
                                               const headers_list& extra) {
    http::response<http::string_body> res;
    res.version(version == 10 ? 10 : 11);
    res.result(http_status_of(e));
    res.set(http::field::server, "calserve");
    res.set(http::field::content_type, "application/json");
    if (map_status(e.code).retry_after) {
        res.set(http::field::retry_after, std::to_string(o.retry_after.count()));
    }
    for (const auto& [name, value] : extra) res.set(name, value);
    res.keep_alive(false);
    res.body() = error_json(e);
    res.prepare_payload();
    return res;
}

std::optional<api_error> head_refusal(const http_request& head) {
    if (head.version() >= 11 && head.find(http::field::host) == head.end()) {
        return field_error("Host", "required in HTTP/1.1 requests", status::parse_error);
    }
    return std::nullopt;
}

namespace {
// An answer that ends the connection: Connection: close, the JSON error body.
// Arguments by value and named at the call: no temporary may live across a suspension.
asio::awaitable<void> send_refusal(beast::tcp_stream& stream, const http_server::impl& srv, unsigned version,
                                   api_error e, headers_list extra) {
    auto res = make_refusal(srv.options, version, e, extra);
    srv.count_response(res.result_int());
    stream.expires_after(srv.options.write_timeout);
    auto [ec, n] = co_await http::async_write(stream, res, asio::as_tuple(use_awaitable));
    (void)ec;
    (void)n;
    stream.expires_never();
}

asio::awaitable<void> linger_close(beast::tcp_stream& stream, const server_options& o) {
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
    std::vector<char> sink(k_linger_chunk);
    std::size_t dropped = 0;
    stream.expires_after(o.linger_timeout);
    while (dropped < o.linger_bytes) {
        auto [ec, n] = co_await stream.async_read_some(asio::buffer(sink), asio::as_tuple(use_awaitable));
        if (ec) break;  // EOF (the client read the answer and closed), the bound, or a reset
        dropped += n;
    }
    stream.expires_never();
    stream.socket().close(ignored);
}

bool is_probe(const http_request& req) {
    std::string_view target = req.target();
    std::string_view path = target.substr(0, target.find('?'));
    const bool read_only = req.method() == http::verb::get || req.method() == http::verb::head;
    return read_only && (path == "/health" || path == "/ready");
}

// The checks Beast's accept makes, answered in the API's JSON error shape.
std::optional<std::pair<api_error, headers_list>> ws_handshake_error(const http_request& req) {
    if (!beast::websocket::is_upgrade(req)) {
        api_error e{status::invalid_argument, {}, "/v1/ws takes a WebSocket upgrade (GET, HTTP/1.1, Upgrade: websocket)"};
        return std::pair{with_http_status(e, 426), headers_list{{"Upgrade", "websocket"}}};
    }
    auto key = req[http::field::sec_websocket_key];
    if (key.empty() || key.size() > k_ws_key_size) {
        return std::pair{field_error("Sec-WebSocket-Key", "missing or malformed"), headers_list{}};
    }
    if (req[http::field::sec_websocket_version] != "13") {
        return std::pair{with_http_status(field_error("Sec-WebSocket-Version", "expected 13"), 426),
                         headers_list{{"Sec-WebSocket-Version", "13"}}};
    }
    return std::nullopt;
}

}  // namespace

std::optional<std::pair<api_error, headers_list>> ws_refusal(const http_server::impl& srv, const http_request& req) {
    std::optional<std::pair<api_error, headers_list>> bad;
    if (auto refused = origin_refusal(srv, req)) bad.emplace(std::move(*refused), headers_list{});
    if (!bad) bad = ws_handshake_error(req);
    if (!bad && !srv.authorized_ws(req)) {
        bad.emplace(api_error{status::unauthorized, {}, "missing or wrong API key"}, headers_list{});
    }
    // A socket opened now could start no generation: refuse the upgrade itself (503 +
    // Retry-After), so a front retries it on another daemon instead of tunnelling the
    // client to one that will refuse every `generate` (docs/deploy.md).
    if (!bad && !srv.accepting_work()) {
        bad.emplace(api_error{status::not_ready, {}, srv.draining.load() ? "server is draining" : "server not ready"},
                    headers_list{});
    }
    return bad;
}

namespace {
// Waits for a kept-alive connection's next request (idle_timeout); false when it ended.
asio::awaitable<bool> wait_next_request(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                                        const server_options& o) {
    if (buffer.size() > 0) co_return true;
    stream.expires_after(o.idle_timeout);
    auto [ec, n] = co_await stream.async_read_some(buffer.prepare(k_first_read), asio::as_tuple(use_awaitable));
    stream.expires_never();
    if (ec) co_return false;
    buffer.commit(n);
    co_return true;
}

asio::awaitable<after> on_request(std::shared_ptr<http_server::impl> srv, std::uint64_t conn_id,
                                  std::shared_ptr<beast::tcp_stream> stream, beast::flat_buffer& buffer,
                                  session_state& st, http_request req) {
    http_exchange ex{srv, conn_id, *stream, buffer, req, steady_clock::now(), unix_now(), {}};
    std::string_view target = req.target();
    if (target.substr(0, target.find('?')) == "/v1/ws") {
        auto bad = ws_refusal(*srv, req);
        if (bad) {
            co_await send_refusal(*stream, *srv, req.version(), bad->first, bad->second);
            co_return after::close;
        }
        st.upgraded = true;
        srv->count_response(101);
        co_await run_websocket(srv, conn_id, std::move(*stream), std::move(req));
        co_return after::close;
    }
    // Over the cap, or draining: this answer says `Connection: close`, so kept-alive
    // connections (a front's upstream pool) wind down with their last answer instead of
    // being closed idle at the end of the drain, where a request could cross the close.
    if (st.overflow || srv->draining.load()) req.keep_alive(false);
    co_return co_await dispatch(ex) ? after::keep : after::close;
}

// Reads one request (header, checks, 100-continue, body) and answers it.
asio::awaitable<after> serve_one(std::shared_ptr<http_server::impl> srv, std::uint64_t conn_id,
                                 std::shared_ptr<beast::tcp_stream> stream, beast::flat_buffer& buffer,
                                 session_state& st) {
    const auto& o = srv->options;
    if (!st.first && !co_await wait_next_request(*stream, buffer, o)) co_return after::close;
    st.first = false;
    http::request_parser<http::string_body> parser;
    limit_request_parser(parser, o);
    stream->expires_after(o.header_timeout);
    auto [ec, n] = co_await http::async_read_header(*stream, buffer, parser, asio::as_tuple(use_awaitable));
    (void)n;
    stream->expires_never();
    if (ec) {
        auto refusal = parse_refusal(ec, o);
        if (!refusal) co_return after::close;
        if (refusal->code == status::payload_too_large) srv->metrics.requests(metrics::outcome::rejected).inc();
        co_await send_refusal(*stream, *srv, 11, *refusal, {});
        co_return after::linger;
    }
    const auto& head = parser.get();
    std::optional<api_error> refusal = head_refusal(head);
    if (!refusal && st.overflow && !is_probe(head)) {
        srv->connections_refused.inc();
        refusal = api_error{status::not_ready, {},
                            "server at its connection limit (server.max_connections = " +
                                std::to_string(srv->max_connections) + "); retry later"};
    }
    if (refusal) {
        co_await send_refusal(*stream, *srv, head.version(), *refusal, {});
        co_return parser.is_done() ? after::close : after::linger;
    }
    if (!parser.is_done()) {
        if (head.version() >= 11 && beast::iequals(head[http::field::expect], "100-continue")) {
            static constexpr std::string_view k_continue = "HTTP/1.1 100 Continue\r\n\r\n";
            stream->expires_after(o.write_timeout);
            auto [wec, wn] = co_await asio::async_write(*stream, asio::buffer(k_continue), asio::as_tuple(use_awaitable));
            (void)wn;
            if (wec) co_return after::close;
        }
        stream->expires_after(o.read_timeout);
        auto [bec, bn] = co_await http::async_read(*stream, buffer, parser, asio::as_tuple(use_awaitable));
        (void)bn;
        stream->expires_never();
        if (bec) {
            auto body_refusal = parse_refusal(bec, o);
            if (!body_refusal) co_return after::close;
            co_await send_refusal(*stream, *srv, parser.get().version(), *body_refusal, {});
            co_return after::linger;
        }
    }
    co_return co_await on_request(srv, conn_id, stream, buffer, st, parser.release());
}
}  // namespace

asio::awaitable<void> run_session(std::shared_ptr<http_server::impl> srv, std::uint64_t id,
                                  std::shared_ptr<beast::tcp_stream> stream, bool overflow) {
    beast::flat_buffer buffer;
    session_state st;
    st.overflow = overflow;
    after next = after::close;
    try {
        do {
            next = co_await serve_one(srv, id, stream, buffer, st);
        } while (next == after::keep && !srv->stopped.load());
    } catch (const std::exception&) {
        // A failed write or a closed socket ends the connection; requests were cancelled on the way out.
        next = after::close;
    }
    if (!st.upgraded) {
        if (next == after::linger && !srv->stopped.load()) {
            co_await linger_close(*stream, srv->options);
        } else {
            beast::error_code ignored;
            stream->socket().shutdown(tcp::socket::shutdown_send, ignored);
        }
    }
    srv->remove_conn(id);
}

}  // namespace calserve::net
