#pragma once
//! The client calls of `calserve soak --real`: one generation request shaped to
//! exercise a live daemon (streaming or not, greedy or sampled, with a deadline,
//! closed mid-stream, or read slowly) and a plain GET, each on a fresh connection.
//!
//! Fault model: every failure is a value in `request_end` / `result`, never an
//! exception. Socket receive and send timeouts bound every blocking call, so a
//! daemon that stops answering turns into a transport error, not a hung soak.
//!
//! Invariants: `closed_by_client` is set only when the soak itself closed the
//! connection before the stream ended; a request reports exactly one end.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/result.hpp"
#include "loadgen/client.hpp"
#include "soak/real_soak_stats.hpp"

namespace calserve::soak {

struct soak_request {
    std::string model;
    std::vector<std::int64_t> prompt;    // token ids
    std::int64_t max_tokens = 1;
    bool stream = false;
    double temperature = 0;              // 0 = greedy
    double top_p = 1;
    std::uint64_t seed = 0;              // per-request sampling seed (sampled requests)
    std::int64_t timeout_ms = 0;         // 0: no client deadline in the body
    std::int64_t disconnect_after = -1;  // streaming: close after this many token events (-1: never)
    std::int64_t read_pause_ms = 0;      // streaming: sleep between socket reads (slow consumer)
};

struct request_end {
    seen_end seen;
    std::string request_id;              // the daemon's X-Request-Id (its log names the request by it)
    std::string detail;                  // transport or protocol problem, for the error table
    std::int64_t token_events = 0;
};

// Sends `req` to /v1/completions and reads the answer to its end (or closes early
// as asked). `io_timeout` bounds each socket read/write.
request_end perform_request(const loadgen::endpoint& ep, const soak_request& req,
                            std::chrono::milliseconds io_timeout);

// GET `path`; the body of a 200, else an error.
result<std::string> fetch_text(const loadgen::endpoint& ep, const std::string& path,
                               std::chrono::milliseconds io_timeout);

// Hostile clients (no request outcome; the soak checks the daemon still answers):
// `count` connections that send nothing, held for `hold` while `during` runs, then
// closed (a connection flood); returns how many were opened.
std::size_t flood_connections(const loadgen::endpoint& ep, std::size_t count, std::chrono::milliseconds hold,
                              const std::function<void()>& during);
// A streaming request whose answer is never read, held for `hold` while `during`
// runs, then closed (a reader that stalls and vanishes); false if it was not sent.
bool never_reading_stream(const loadgen::endpoint& ep, const soak_request& req, std::chrono::milliseconds hold,
                          const std::function<void()>& during);

// The error table's key for an end that was not a completion: "HTTP 503 ccu_exception",
// "stream 200 queue_full", "transport: ...".
std::string error_key(const request_end& e);

}  // namespace calserve::soak
