#pragma once
//! The OpenAI-compatible HTTP/WebSocket front end (Beast, C++20 coroutines).
//!
//! Role: accept connections on a caller-provided `io_context` (run by N threads
//! elsewhere), one strand per connection; route requests through the one route
//! table (net/routes.cpp); turn bodies into engine `generation_request`s and
//! stream what the engine's sink receives as SSE, JSON or WebSocket events.
//!
//! Fault model: every failure is an HTTP/WS error in OpenAI's shape, mapped from
//! a `calserve::status` in one place (api_error.hpp). A client that disconnects
//! has its request cancelled (engine.cancel) as soon as the read side sees it; a
//! client too slow to take its stream has the stream cancelled with an error
//! (bounded per-stream / per-socket queues). Nothing here blocks an engine thread.
//!
//! Lifetime: `stop()` closes the listener and every connection; the engine and
//! metrics must outlive the io_context's handlers (stop, then let the io_context
//! finish or destroy it, then destroy the engine).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "actors/engine.hpp"
#include "metrics/metrics.hpp"
#include "config/result.hpp"

namespace boost::asio {
class io_context;
}

namespace calserve {
class config;
}

namespace calserve::net {

struct server_options {
    std::string host = "127.0.0.1";
    std::uint16_t port = 0;                         // 0 = ephemeral; start() returns the bound port
    std::string api_key;                            // empty = open
    std::size_t max_body_bytes = 1 << 20;           // larger bodies get 413
    std::size_t write_queue = 256;                  // token events buffered per stream / per WebSocket
    std::string timing_log;                         // JSONL path; empty = off
    std::int64_t default_max_tokens = 256;          // when a request gives none
    std::chrono::seconds retry_after{1};            // Retry-After on 429/503
    std::chrono::seconds idle_timeout{60};          // keep-alive wait for the next request's first byte
    std::chrono::milliseconds header_timeout{5000}; // request line + headers (a new connection: from accept)
    std::chrono::seconds read_timeout{60};          // the whole request, headers and body
    std::chrono::seconds write_timeout{30};         // one socket write to the client
    // Lingering close after an answer to a request whose body was not read (413,
    // 400, 431, 503 over the connection cap): the write side is shut, then input is
    // read and dropped for at most this long / this many bytes, so the client's
    // upload is not cut by a reset that would destroy the answer.
    std::chrono::milliseconds linger_timeout{5000};
    std::size_t linger_bytes = 64 << 20;
    // Connections served at once; 0 = derived from RLIMIT_NOFILE (default_max_connections()).
    // Beyond it, up to k_overflow_connections more get one answer (/health and /ready
    // served, anything else 503 + Retry-After) and are closed.
    std::size_t max_connections = 0;
    // Bytes queued for one WebSocket (rendered replies, token and finish events not yet
    // written to the socket). When full the socket's streams overflow and its reader
    // pauses (back-pressure) until the writer drains below it.
    std::size_t ws_queue_bytes = 1 << 20;
    std::size_t tokenize_threads = 2;               // prompt work off the network threads (tokenize_pool)
    std::size_t tokenize_queue = 64;                // prompts waiting for it before 429
    // Fault injection (fault point client_stall), asked before each write of a stream's
    // events: nullopt = no fault; > 0 = the consumer stalls that many milliseconds first
    // (a slow client); <= 0 = the consumer vanishes (connection closed, request cancelled).
    // Empty = never asked. The daemon wires it to its fault registry.
    std::function<std::optional<double>(const std::string& request_id)> client_stall;
    // The web console (net/console/): the page at `/` and GET /v1/console/state. `console`
    // is server.console resolved ("auto" = on when `host` is a loopback address);
    // `console_state` renders the engine view's snapshot (jobs newer than the given
    // sequence number); empty = /v1/console/state answers 404. The daemon wires it
    // to net::console_state.
    bool console = true;
    std::function<std::string(std::uint64_t since_job)> console_state;
    // Browser origins allowed besides the daemon's own (net/origin_policy.hpp):
    // comma-separated `scheme://host[:port]`, or "*" for any; empty = own origin only.
    std::string allowed_origins;

    // server.host/port/api_key/max_body_bytes/ws_write_queue/ws_write_queue_bytes/timing_log/
    // max_connections/header_timeout_ms/linger_ms/linger_bytes/console/allowed_origins, runtime.default_max_tokens.
    static server_options from_config(const config& c);
};

// Connections over max_connections that still get one answer before being closed.
inline constexpr std::size_t k_overflow_connections = 16;

// max_connections when none is configured: the RLIMIT_NOFILE soft limit minus room
// for the process's own files (package, logs, epoll, control socket) and the overflow.
std::size_t default_max_connections();

class http_server {
public:
    http_server(boost::asio::io_context& ioc, actors::engine& engine, metrics::calserve_metrics& metrics,
                server_options options);
    ~http_server();
    http_server(const http_server&) = delete;
    http_server& operator=(const http_server&) = delete;

    // Binds and starts accepting; returns the bound port.
    result<std::uint16_t> start();
    // Drain: /ready turns false, new generation requests get 503, engine.drain() is
    // called; requests in flight continue. resume() undoes it.
    void drain();
    void resume();
    bool draining() const;
    // Stops accepting and ends every connection; their requests are cancelled. With a
    // grace period, streams in flight first get a last error event (503 "server shutting
    // down") and their end ([DONE] / WebSocket `error` and close 1001), waiting at most
    // `grace` for them, then the rest is closed. Call with a grace only off the io threads.
    void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(0));
    // Open connections (HTTP and WebSocket).
    std::size_t connections() const;
    // The connection cap in force (options.max_connections or the derived default).
    std::size_t max_connections() const;

    struct impl;

private:
    std::shared_ptr<impl> impl_;
};

}  // namespace calserve::net
