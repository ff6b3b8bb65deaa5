// Listener, per-connection session loop, auth, drain and stop. See http_server.hpp.
#include "net/http_server.hpp"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/string.hpp>
#include <chrono>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <thread>

#include "config/config.hpp"
#include "net/console/console_routes.hpp"
#include "net/server_impl.hpp"

namespace calserve::net {

namespace {
constexpr std::size_t k_watch_limit = 16 * 1024;   // bytes a peer may pipeline while we stream
// Accept backoff when out of descriptors (EMFILE/ENFILE) or memory: first and
// longest wait, and the least time between two log lines about it.
constexpr std::chrono::milliseconds k_backoff_first{10};
constexpr std::chrono::milliseconds k_backoff_max{1000};
constexpr std::chrono::seconds k_backoff_log_every{10};
// Descriptors kept out of the derived connection cap for the process's own files.
constexpr std::size_t k_fd_reserve_min = 64;
constexpr std::size_t k_min_connections = 16;
// Status codes the server answers with (docs/api.md), created at start for calserve_http_responses_total.
constexpr unsigned k_response_codes[] = {101, 200, 204, 400, 401, 403, 404, 405, 413, 415, 426, 429, 431, 500, 503, 504};
using asio::use_awaitable;

bool keys_equal(std::string_view a, std::string_view b) {
    // Hash first so the comparison is constant-time in the key length too.
    unsigned char ha[SHA256_DIGEST_LENGTH], hb[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(a.data()), a.size(), ha);
    SHA256(reinterpret_cast<const unsigned char*>(b.data()), b.size(), hb);
    return CRYPTO_memcmp(ha, hb, SHA256_DIGEST_LENGTH) == 0;
}

std::size_t resolve_max_connections(std::size_t configured) {
    return configured > 0 ? configured : default_max_connections();
}
}  // namespace

std::size_t default_max_connections() {
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
    const std::size_t limit = rl.rlim_cur == RLIM_INFINITY ? std::size_t(1) << 20 : std::size_t(rl.rlim_cur);
    const std::size_t reserve = std::max(k_fd_reserve_min, limit / 4) + k_overflow_connections;
    return limit > reserve + k_min_connections ? limit - reserve : k_min_connections;
}

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
    o.ws_queue_bytes = static_cast<std::size_t>(c.integer("server.ws_write_queue_bytes"));
    o.max_connections = static_cast<std::size_t>(c.integer("server.max_connections"));
    o.header_timeout = std::chrono::milliseconds(c.integer("server.header_timeout_ms"));
    o.linger_timeout = std::chrono::milliseconds(c.integer("server.linger_ms"));
    o.linger_bytes = static_cast<std::size_t>(c.integer("server.linger_bytes"));
    o.default_max_tokens = c.integer("runtime.default_max_tokens");
    o.tokenize_threads = static_cast<std::size_t>(c.integer("server.tokenize_threads"));
    o.tokenize_queue = static_cast<std::size_t>(c.integer("server.tokenize_queue"));
    o.console = console_enabled(c.string("server.console"), o.host);
    o.allowed_origins = c.string("server.allowed_origins");
    return o;
}

http_server::impl::impl(asio::io_context& ctx, actors::engine& e, calserve::metrics::calserve_metrics& m, server_options o)
    : ioc(ctx),
      engine(e),
      metrics(m),
      options(std::move(o)),
      acceptor_strand(asio::make_strand(ctx)),
      max_connections(resolve_max_connections(options.max_connections)),
      connections_open(m.families.add_gauge("calserve_http_connections", "open HTTP and WebSocket connections").get()),
      connections_refused(m.families
                              .add_counter("calserve_http_connections_refused_total",
                                           "requests answered 503 over server.max_connections")
                              .get()),
      accept_backoffs(m.families
                          .add_counter("calserve_http_accept_backoffs_total",
                                       "accept waits after running out of descriptors (EMFILE/ENFILE) or memory")
                          .get()),
      ws_queued_bytes(m.families
                          .add_gauge("calserve_ws_queued_bytes",
                                     "bytes queued for WebSocket clients and not yet written to their sockets")
                          .get()),
      responses(m.families.add_counter("calserve_http_responses_total",
                                       "HTTP responses by status code (a stream counts its 200 when its header is sent, "
                                       "an accepted WebSocket upgrade 101)",
                                       {"code"})) {
    // The codes the server answers with exist from the first scrape (value 0).
    for (unsigned code : k_response_codes) responses.labels({std::to_string(code)});
}

bool http_server::impl::authorized(const http_request& req) const {
    if (options.api_key.empty()) return true;
    auto it = req.find(http::field::authorization);
    if (it == req.end()) return false;
    // credentials = auth-scheme 1*SP token68; the scheme is case-insensitive (RFC 9110 11.1).
    std::string_view v = it->value();
    const auto space = v.find(' ');
    if (space == std::string_view::npos || !beast::iequals(v.substr(0, space), "Bearer")) return false;
    const auto key_at = v.find_first_not_of(' ', space);
    if (key_at == std::string_view::npos) return false;
    return keys_equal(v.substr(key_at), options.api_key);
}

bool http_server::impl::authorized_ws(const http_request& req) const {
    if (authorized(req)) return true;
    auto key = ws_protocol_key(req);
    return key && keys_equal(*key, options.api_key);
}

bool http_server::impl::accepting_work() const { return !draining.load() && !stopped.load() && engine.health().ready; }

std::optional<std::uint64_t> http_server::impl::add_conn(std::function<void()> closer, bool& overflow) {
    std::lock_guard lock(conn_mutex);
    overflow = regular_conns >= max_connections;
    if (overflow && conns.size() - regular_conns >= k_overflow_connections) return std::nullopt;
    const auto id = next_conn++;
    conns.emplace(id, conn_entry{std::move(closer), {}, overflow});
    if (!overflow) ++regular_conns;
    connections_open.set(double(conns.size()));
    return id;
}

void http_server::impl::set_conn(std::uint64_t id, std::function<void()> closer) {
    std::lock_guard lock(conn_mutex);
    if (auto it = conns.find(id); it != conns.end()) it->second.close = std::move(closer);
}

void http_server::impl::set_channel(std::uint64_t id, const std::shared_ptr<stream_channel>& channel) {
    {
        std::lock_guard lock(conn_mutex);
        if (auto it = conns.find(id); it != conns.end()) it->second.channel = channel;
    }
    // stop() sets `stopped` before it looks at the channels: a channel registered
    // after that look is shut down here instead.
    if (channel && stopped.load()) channel->shutdown();
}

void http_server::impl::remove_conn(std::uint64_t id) {
    std::lock_guard lock(conn_mutex);
    auto it = conns.find(id);
    if (it == conns.end()) return;
    if (!it->second.overflow) --regular_conns;
    conns.erase(it);
    connections_open.set(double(conns.size()));
}

api_error shutdown_error() { return api_error{status::not_ready, {}, "server shutting down"}; }

asio::awaitable<void> watch_peer(beast::tcp_stream& stream, beast::flat_buffer& buffer) {
    constexpr std::size_t k_chunk = 4096;
    for (;;) {
        if (buffer.size() >= k_watch_limit) {
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
bool out_of_resources(const beast::error_code& ec) {
    return ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space || ec == asio::error::no_memory ||
           ec == boost::system::errc::too_many_files_open_in_system;
}

void start_connection(const std::shared_ptr<http_server::impl>& srv, tcp::socket socket) {
    // Token events are small writes, each wanted at once: with Nagle's algorithm a
    // write waits for the ACK of the previous one, and a peer that delays its ACKs
    // (a proxy reading a response header, then its first chunk) costs ~40 ms per
    // stall: measured as TTFT through nginx (docs/deploy.md). Best effort.
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto stream = std::make_shared<beast::tcp_stream>(std::move(socket));
    std::weak_ptr<beast::tcp_stream> weak = stream;
    auto exec = stream->get_executor();
    bool overflow = false;
    const auto id = srv->add_conn(
        [weak, exec] {
            asio::post(exec, [weak] {
                if (auto s = weak.lock()) {
                    beast::error_code ignored;
                    s->socket().shutdown(tcp::socket::shutdown_both, ignored);
                    s->socket().close(ignored);
                }
            });
        },
        overflow);
    if (!id) {  // over the cap and its overflow: no room even for an answer
        srv->connections_refused.inc();
        beast::error_code ignored;
        stream->socket().close(ignored);
        return;
    }
    asio::co_spawn(exec, run_session(srv, *id, std::move(stream), overflow), asio::detached);
}

// Out of descriptors, accept fails at once for as long as the backlog holds a
// connection: retrying at once would spin a thread. Back off (doubling, bounded)
// and say so; connections that close meanwhile give the descriptors back.
asio::awaitable<void> run_listener(std::shared_ptr<http_server::impl> srv) {
    asio::steady_timer backoff(srv->acceptor_strand);
    std::chrono::milliseconds delay{0};
    std::optional<steady_clock::time_point> last_log;
    for (;;) {
        auto [ec, socket] = co_await srv->acceptor->async_accept(asio::make_strand(srv->ioc),
                                                                 asio::as_tuple(use_awaitable));
        if (srv->stopped.load()) co_return;
        if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) co_return;
        if (ec && !out_of_resources(ec)) continue;  // e.g. ECONNABORTED: the peer left the backlog
        if (ec) {
            srv->accept_backoffs.inc();
            delay = delay.count() == 0 ? k_backoff_first : std::min(delay * 2, k_backoff_max);
            const auto now = steady_clock::now();
            if (!last_log || now - *last_log >= k_backoff_log_every) {
                last_log = now;
                spdlog::warn("http: accept failed ({}) with {} connections open: backing off, retrying every {} ms at most",
                             ec.message(), srv->conns_size(), k_backoff_max.count());
            }
            backoff.expires_after(delay);
            auto [tec] = co_await backoff.async_wait(asio::as_tuple(use_awaitable));
            (void)tec;
            continue;
        }
        if (delay.count() > 0) {
            spdlog::warn("http: accepting connections again ({} open)", srv->conns_size());
            delay = std::chrono::milliseconds(0);
        }
        start_connection(srv, std::move(socket));
    }
}
}  // namespace

http_server::http_server(asio::io_context& ioc, actors::engine& engine, metrics::calserve_metrics& metrics,
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
    s.origins = make_origin_policy(s.options.host, port, s.options.allowed_origins);
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

void http_server::stop(std::chrono::milliseconds grace) {
    if (impl_->stopped.exchange(true)) return;
    auto srv = impl_;
    if (srv->acceptor) {
        asio::post(srv->acceptor_strand, [srv] {
            beast::error_code ignored;
            srv->acceptor->close(ignored);
        });
    }
    std::vector<std::function<void()>> closers;
    std::vector<std::shared_ptr<stream_channel>> streams;
    {
        std::lock_guard lock(srv->conn_mutex);
        for (auto& [id, c] : srv->conns) {
            auto channel = grace.count() > 0 ? c.channel.lock() : nullptr;
            if (channel) streams.push_back(std::move(channel));
            else closers.push_back(c.close);
        }
    }
    for (auto& s : streams) s->shutdown();   // they end with an error event, then close
    for (auto& close : closers) close();
    if (streams.empty()) return;
    const auto deadline = steady_clock::now() + grace;
    while (connections() > 0 && steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::lock_guard lock(srv->conn_mutex);
    for (auto& [id, c] : srv->conns) c.close();
}

std::size_t http_server::connections() const { return impl_->conns_size(); }

std::size_t http_server::max_connections() const { return impl_->max_connections; }

std::size_t http_server::impl::conns_size() const {
    std::lock_guard lock(conn_mutex);
    return conns.size();
}

}  // namespace calserve::net
