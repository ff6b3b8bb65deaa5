#pragma once
//! Internals shared by the server's translation units (listener/session,
//! routes, generation handlers, WebSocket). Not part of the public interface.
//!
//! Threading: `impl` is shared by every connection coroutine; its mutable state is
//! atomics or mutex-guarded. Each exchange runs on its connection's strand.
#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "net/api_error.hpp"
#include "net/api_params.hpp"
#include "net/stream_channel.hpp"
#include "net/http_server.hpp"
#include "net/origin_policy.hpp"
#include "net/timing_log.hpp"
#include "net/tokenize_pool.hpp"

namespace boost::json {
class object;
}

namespace calserve::net {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using http_request = http::request<http::string_body>;
using headers_list = std::vector<std::pair<std::string, std::string>>;

struct http_server::impl : std::enable_shared_from_this<http_server::impl> {
    impl(asio::io_context& ioc, actors::engine& e, calserve::metrics::calserve_metrics& m, server_options o);

    asio::io_context& ioc;
    actors::engine& engine;
    calserve::metrics::calserve_metrics& metrics;
    const server_options options;
    // Prompt work (parse, chat template, tokenizer) of generation requests.
    std::unique_ptr<tokenize_pool> prompt_pool =
        std::make_unique<tokenize_pool>(options.tokenize_threads, options.tokenize_queue, &metrics);
    std::unique_ptr<timing_log> timing;             // null = off
    std::optional<tcp::acceptor> acceptor;          // used on acceptor_strand only
    asio::strand<asio::io_context::executor_type> acceptor_strand;
    std::atomic<bool> draining{false};
    std::atomic<bool> stopped{false};
    const std::size_t max_connections;              // options.max_connections or the derived default
    // Set by start() before the first accept (the own origin needs the bound port).
    origin_policy origins;

    // Net-side metric families (registered in the daemon's registry).
    metrics::gauge& connections_open;       // calserve_http_connections
    metrics::counter& connections_refused;  // calserve_http_connections_refused_total
    metrics::counter& accept_backoffs;      // calserve_http_accept_backoffs_total
    metrics::gauge& ws_queued_bytes;        // calserve_ws_queued_bytes
    mutable metrics::family<metrics::counter> responses;  // calserve_http_responses_total{code}
    // Counts one response (or accepted WebSocket upgrade, 101) by its status code.
    void count_response(unsigned code) const { responses.labels({std::to_string(code)}).inc(); }

    // Open connections, so stop() can end them. `close` posts onto the connection's
    // strand and closes its socket (a no-op once the connection is gone); `channel` is
    // the stream channel of the generation (or WebSocket) it runs, if any, which stop()
    // shuts down so the stream ends with an error event instead of a bare close.
    struct conn_entry {
        std::function<void()> close;
        std::weak_ptr<stream_channel> channel;
        bool overflow = false;                      // over max_connections: one answer, then closed
    };
    mutable std::mutex conn_mutex;
    std::map<std::uint64_t, conn_entry> conns;      // guarded by conn_mutex
    std::uint64_t next_conn = 0;                    // guarded by conn_mutex
    std::size_t regular_conns = 0;                  // guarded; entries with !overflow
    // Registers a connection unless both the cap and the overflow are full (then nullopt).
    // `overflow` tells which of the two it got.
    std::optional<std::uint64_t> add_conn(std::function<void()> closer, bool& overflow);
    void set_conn(std::uint64_t id, std::function<void()> closer);
    // The channel a connection's stream runs on (null when it ends); shut down at once if stopping.
    void set_channel(std::uint64_t id, const std::shared_ptr<stream_channel>& channel);
    void remove_conn(std::uint64_t id);
    std::size_t conns_size() const;

    bool authorized(const http_request& req) const;
    // authorized(), or the key offered as the WebSocket subprotocol calserve.key.<hex>
    // (net/console/console_routes.hpp): a browser cannot set Authorization on a WebSocket.
    bool authorized_ws(const http_request& req) const;
    bool accepting_work() const;   // not draining and the engine is ready
};

// One request/response exchange on a connection.
struct http_exchange {
    std::shared_ptr<http_server::impl> server;
    std::uint64_t conn_id;
    beast::tcp_stream& stream;
    beast::flat_buffer& buffer;
    http_request& req;
    steady_clock::time_point received;
    double received_unix = 0;
    std::string request_id;  // a generation's id, once it has one: sent as X-Request-Id with any answer
};

// Route table and dispatch (routes.cpp). Returns whether to keep the connection open.
asio::awaitable<bool> dispatch(http_exchange& ex);

// Response helpers (routes.cpp).
asio::awaitable<bool> send_response(http_exchange& ex, unsigned status, std::string body,
                                    std::string_view content_type = "application/json", headers_list extra = {});

// The CORS headers of an answer to an allowed cross-origin request (the Origin echoed,
// Vary: Origin); none without an Origin (routes.cpp).
headers_list cors_headers(const http_server::impl& srv, const http_request& req);
asio::awaitable<bool> send_error(http_exchange& ex, const api_error& e);

// The error of a stream cut by stop(): 503 "server shutting down".
api_error shutdown_error();

// Generation routes (generate_http.cpp).
asio::awaitable<bool> handle_generate(http_exchange& ex, api_kind kind);

// Reads the peer until it closes (or until cancelled); bytes it reads are kept in
// `buffer` for the next request. Returns when the peer is gone.
asio::awaitable<void> watch_peer(beast::tcp_stream& stream, beast::flat_buffer& buffer);

// One accepted connection until it closes (http_session.cpp); `overflow`: over
// max_connections, so it gets one answer (/health and /ready served, else 503).
asio::awaitable<void> run_session(std::shared_ptr<http_server::impl> srv, std::uint64_t id,
                                  std::shared_ptr<beast::tcp_stream> stream, bool overflow);

// WebSocket /v1/ws (ws_session.cpp): takes over the connection after the upgrade request.
asio::awaitable<void> run_websocket(std::shared_ptr<http_server::impl> server, std::uint64_t conn_id,
                                    beast::tcp_stream stream, http_request req);

// Shared by HTTP and WebSocket generation (generate_http.cpp) -----------------

// Drain/readiness check, body validation, model check, tokenization (timed as the
// tokenize phase) and context check. Fills a request ready for engine.submit but
// for its id.
std::variant<api_request, api_error> admit_request(http_server::impl& srv, api_kind kind,
                                                   const boost::json::object& body, double& tokenize_s);
// admit_request on the tokenize pool (never on a network thread); a full pool
// answers `overloaded` (429 with Retry-After) at once.
using admission = std::variant<api_request, api_error>;
asio::awaitable<admission> admit_on_pool(http_server::impl& srv, api_kind kind, const boost::json::object& body,
                                         double& tokenize_s);

// Client-visible token timing: records TTFT and inter-token latency histograms.
struct token_clock {
    steady_clock::time_point received;
    std::optional<steady_clock::time_point> last;
    double ttft_s = -1;
    void on_token(metrics::calserve_metrics& m, steady_clock::time_point at);
};

// calserve_requests_total{outcome} for a finished request.
void count_outcome(metrics::calserve_metrics& m, actors::finish_reason r);

// The error a non-successful finish reports (timeout -> 504, error -> its status, ...).
api_error finish_error(const actors::generation_result& r);

// Applies an injected client_stall before a write: waits out a stall; returns false
// when the consumer is to vanish.
asio::awaitable<bool> apply_client_stall(const server_options& o, std::string request_id);

double seconds_between(steady_clock::time_point a, steady_clock::time_point b);

}  // namespace calserve::net
