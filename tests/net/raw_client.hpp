#pragma once
// Raw-socket HTTP clients for tests of the protocol edges (malformed requests,
// uploads written before the answer is read, HTTP/1.0, slow clients): bytes go
// out exactly as given, and every read has a receive timeout so a server that
// never answers fails the test instead of hanging it.
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>
#include <optional>
#include <string>
#include <sys/socket.h>
#include <sys/time.h>

#include "tests/net/net_fixture.hpp"

namespace calserve::test {

// Receive timeout of the raw clients: a read that gets nothing this long fails.
inline constexpr int k_raw_read_timeout_s = 20;

inline tcp::socket raw_connect(asio::io_context& ioc, std::uint16_t port, int read_timeout_s = k_raw_read_timeout_s) {
    auto s = connect(ioc, port);
    timeval tv{read_timeout_s, 0};
    ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return s;
}

// Everything the peer sends until it closes (or the read fails).
inline std::string read_to_eof(tcp::socket& s) {
    std::string out;
    char buf[16384];
    for (;;) {
        beast::error_code ec;
        auto n = s.read_some(asio::buffer(buf), ec);
        out.append(buf, n);
        if (ec) return out;
    }
}

// Reads one response (no body for HEAD when `head`); nullopt when the read fails.
inline std::optional<http::response<http::string_body>> read_response(tcp::socket& s, beast::flat_buffer& buf,
                                                                      bool head = false) {
    http::response_parser<http::string_body> p;
    p.body_limit(64 * 1024 * 1024);
    p.skip(head);
    beast::error_code ec;
    http::read(s, buf, p, ec);
    if (ec) return std::nullopt;
    return p.release();
}

// Sends `request` as is and reads one response (nullopt: no response came).
inline std::optional<http::response<http::string_body>> raw_exchange(std::uint16_t port, const std::string& request,
                                                                     bool head = false) {
    asio::io_context ioc;
    auto s = raw_connect(ioc, port);
    beast::error_code ec;
    asio::write(s, asio::buffer(request), ec);
    beast::flat_buffer buf;
    return read_response(s, buf, head);
}

// After an answer that ends the connection: the peer closed it (EOF, nothing more).
inline bool closed_after(tcp::socket& s, beast::flat_buffer& buf) {
    if (buf.size() > 0) return false;
    char c;
    beast::error_code ec;
    auto n = s.read_some(asio::buffer(&c, 1), ec);
    return n == 0 && ec == asio::error::eof;
}

}  // namespace calserve::test
