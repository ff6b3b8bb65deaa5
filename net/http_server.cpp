// Listener, per-connection session loop, auth, drain and stop. See http_server.hpp.
#include "net/http_server.hpp"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <chrono>

#include "config/config.hpp"
#include "net/request_path.hpp"

namespace calserve::net {

namespace {
constexpr std::size_t k_header_limit = k_header_limit_bytes;
using asio::use_awaitable;

bool keys_equal(std::string_view a, std::string_view b) {
    // Hash first so the comparison is constant-time in the key length too.
    unsigned char ha[SHA256_DIGEST_LENGTH], hb[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(a.data()), a.size(), ha);
    SHA256(reinterpret_cast<const unsigned char*>(b.data()), b.size(), hb);
    return CRYPTO_memcmp(ha, hb, SHA256_DIGEST_LENGTH) == 0;
}

double unix_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

asio::awaitable<void> run_session(std::shared_ptr<http_server::impl> srv, tcp::socket socket);
}  // namespace

double seconds_between(steady_clock::time_point a, steady_clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

server_options server_options::from_config(const config& c) {
    server_options o;
    o.host = c.string("server.host");
    o.port = static_cast<std::uint16_t>(c.integer("server.port"));
    o.api_key = c.string("server.api_key");
    o.max_body_bytes = static_cast<std::size_t>(c.integer("server.max_body_bytes"));
    o.write_queue = static_cast<std::size_t>(c.integer("server.ws_write_queue"));
    o.timing_log = c.string("server.timing_log");
    o.default_max_tokens = c.integer("runtime.default_max_tokens");
    return o;
}

http_server::impl::impl(asio::io_context& ctx, actors::engine& e, actors::calserve_metrics& m, server_options o)
    : ioc(ctx), engine(e), metrics(m), options(std::move(o)), acceptor_strand(asio::make_strand(ctx)) {}

bool http_server::impl::authorized(const http_request& req) const {
    if (options.api_key.empty()) return true;
    auto it = req.find(http::field::authorization);
    if (it == req.end()) return false;
    std::string_view v = it->value();
    constexpr std::string_view bearer = "Bearer ";
    if (v.size() < bearer.size() || v.substr(0, bearer.size()) != bearer) return false;
    return keys_equal(v.substr(bearer.size()), options.api_key);
}

bool http_server::impl::accepting_work() const { return !draining.load() && !stopped.load() && engine.health().ready; }

std::uint64_t http_server::impl::add_conn(std::function<void()> closer) {
    std::lock_guard lock(conn_mutex);
    const auto id = next_conn++;
    conns.emplace(id, std::move(closer));
    return id;
}

void http_server::impl::set_conn(std::uint64_t id, std::function<void()> closer) {
    std::lock_guard lock(conn_mutex);
    conns[id] = std::move(closer);
}

void http_server::impl::remove_conn(std::uint64_t id) {
    std::lock_guard lock(conn_mutex);
    conns.erase(id);
}

asio::awaitable<void> watch_peer(beast::tcp_stream& stream, beast::flat_buffer& buffer) {
    constexpr std::size_t k_chunk = 4096;
    for (;;) {
        if (buffer.size() >= k_header_limit) {
            // A client pipelining this much while we stream is not waiting for us; stop
            // reading (the write side still notices a close) and just wait to be cancelled.
            asio::steady_timer t(stream.get_executor(), steady_clock::time_point::max());
            co_await t.async_wait(asio::as_tuple(use_awaitable));
            co_return;
        }
        auto [ec, n] = co_await stream.socket().async_read_some(buffer.prepare(k_chunk), asio::as_tuple(use_awaitable));
        if (ec) co_return;  // peer closed, reset, or we were cancelled
        buffer.commit(n);
    }
}

namespace {
asio::awaitable<bool> serve_one(std::shared_ptr<http_server::impl> srv, std::uint64_t conn_id,
                                std::shared_ptr<beast::tcp_stream> stream, beast::flat_buffer& buffer,
                                bool& upgraded) {
    http::request_parser<http::string_body> parser;
    limit_request_parser(parser, srv->options);
    stream->expires_after(srv->options.idle_timeout);
    auto [ec, n] = co_await http::async_read(*stream, buffer, parser, asio::as_tuple(use_awaitable));
    (void)n;
    stream->expires_never();
    http_request req;
    http_exchange ex{srv, *stream, buffer, req, steady_clock::now(), unix_now()};
    if (ec == http::error::body_limit) {
        req.version(11);
        req.keep_alive(false);
        srv->metrics.requests(actors::metrics::outcome::rejected).inc();
        api_error too_large = field_error(
            "body", "larger than server.max_body_bytes (" + std::to_string(srv->options.max_body_bytes) + " bytes)",
            status::payload_too_large);
        co_await send_error(ex, too_large);
        co_return false;
    }
    if (ec) co_return false;
    req = parser.release();
    if (boost::beast::websocket::is_upgrade(req) && req.target() == "/v1/ws") {
        if (!srv->authorized(req)) {
            api_error denied{status::unauthorized, {}, "missing or wrong API key"};
            co_await send_error(ex, denied);
            co_return false;
        }
        upgraded = true;
        co_await run_websocket(srv, conn_id, std::move(*stream), std::move(req));
        co_return false;
    }
    co_return co_await dispatch(ex);
}

asio::awaitable<void> run_session(std::shared_ptr<http_server::impl> srv, tcp::socket socket) {
    auto stream = std::make_shared<beast::tcp_stream>(std::move(socket));
    std::weak_ptr<beast::tcp_stream> weak = stream;
    auto exec = stream->get_executor();
    const auto id = srv->add_conn([weak, exec] {
        asio::post(exec, [weak] {
            if (auto s = weak.lock()) {
                beast::error_code ignored;
                s->socket().shutdown(tcp::socket::shutdown_both, ignored);
                s->socket().close(ignored);
            }
        });
    });
    beast::flat_buffer buffer;
    bool upgraded = false;
    try {
        while (!srv->stopped.load() && co_await serve_one(srv, id, stream, buffer, upgraded)) {
        }
    } catch (const std::exception&) {
        // A failed write or a closed socket ends the connection; requests were cancelled on the way out.
    }
    if (!upgraded) {
        beast::error_code ignored;
        stream->socket().shutdown(tcp::socket::shutdown_send, ignored);
    }
    srv->remove_conn(id);
}

asio::awaitable<void> run_listener(std::shared_ptr<http_server::impl> srv) {
    for (;;) {
        auto [ec, socket] = co_await srv->acceptor->async_accept(asio::make_strand(srv->ioc),
                                                                 asio::as_tuple(use_awaitable));
        if (srv->stopped.load()) co_return;
        if (ec) {
            if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) co_return;
            continue;  // e.g. EMFILE: keep listening
        }
        auto exec = socket.get_executor();
        asio::co_spawn(exec, run_session(srv, std::move(socket)), asio::detached);
    }
}
}  // namespace

http_server::http_server(asio::io_context& ioc, actors::engine& engine, actors::calserve_metrics& metrics,
                         server_options options)
    : impl_(std::make_shared<impl>(ioc, engine, metrics, std::move(options))) {}

http_server::~http_server() { stop(); }

result<std::uint16_t> http_server::start() {
    auto& s = *impl_;
    if (!s.options.timing_log.empty() && !s.timing) {
        auto log = timing_log::open(s.options.timing_log);
        if (!log) return log.error();
        s.timing = std::move(*log);
    }
    beast::error_code ec;
    auto addr = asio::ip::make_address(s.options.host, ec);
    if (ec) return make_error(status::invalid_argument, "server.host: " + s.options.host + ": " + ec.message());
    tcp::endpoint ep(addr, s.options.port);
    s.acceptor.emplace(s.acceptor_strand);
    s.acceptor->open(ep.protocol(), ec);
    if (!ec) s.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) s.acceptor->bind(ep, ec);
    if (!ec) s.acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
        return make_error(status::io_error,
                          "listen on " + s.options.host + ":" + std::to_string(s.options.port) + ": " + ec.message());
    }
    const auto port = s.acceptor->local_endpoint().port();
    asio::co_spawn(s.acceptor_strand, run_listener(impl_), asio::detached);
    return port;
}

void http_server::drain() {
    impl_->draining.store(true);
    impl_->engine.drain();
}

void http_server::resume() {
    impl_->draining.store(false);
    impl_->engine.resume();
}

bool http_server::draining() const { return impl_->draining.load(); }

void http_server::stop() {
    if (impl_->stopped.exchange(true)) return;
    auto srv = impl_;
    if (srv->acceptor) {
        asio::post(srv->acceptor_strand, [srv] {
            beast::error_code ignored;
            srv->acceptor->close(ignored);
        });
    }
    std::map<std::uint64_t, std::function<void()>> conns;
    {
        std::lock_guard lock(srv->conn_mutex);
        conns = srv->conns;
    }
    for (auto& [id, close] : conns) close();
}

std::size_t http_server::connections() const {
    std::lock_guard lock(impl_->conn_mutex);
    return impl_->conns.size();
}

}  // namespace calserve::net
