#pragma once
//! HTTP client side of `calserve bench`: plain-HTTP calls to an OpenAI-compatible
//! server (models, tokenize) and one streamed completion with a client clock on
//! every event (send, first byte, first token, every token, done).
//!
//! Servers differ in the shapes around `/v1/completions`; the client reads the
//! documented ones of calserve, llama.cpp's llama-server and vLLM (tests/loadgen/
//! protocol_test.cpp keeps them as fixtures): `/v1/models` `data[0].id` with the
//! context in `max_model_len` (calserve, vLLM) or llama-server's `/props`
//! `default_generation_settings.n_ctx`; `/tokenize` bodies carrying both
//! `prompt` (calserve, vLLM) and `content` (llama-server); streams whose usage
//! comes in its own chunk (vLLM, calserve), in the last choice chunk
//! (llama-server) or not at all (older llama-server, which also omits [DONE]).
//!
//! Fault model: every network or protocol failure is a value (a `result` error or
//! a record with ok=false and an error text), never an exception out of here; each
//! call has a deadline so a stuck server cannot hang the harness. One connection per
//! in-flight request (no pooling), so connection reuse never hides queueing.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/result.hpp"

namespace calserve::loadgen {

struct endpoint {
    std::string host;
    std::string port;
    std::string base;  // path prefix without trailing '/', e.g. "" or "/api"
    std::string api_key;
};

// Accepts http://host[:port][/prefix]; https is refused (no TLS in the harness).
result<endpoint> parse_url(std::string_view url);

struct http_reply {
    int status = 0;
    std::string body;
};

// One request/response on a fresh connection, bounded by `timeout`.
result<http_reply> http_call(const endpoint& ep, bool post, const std::string& path, const std::string& body,
                             std::chrono::milliseconds timeout);

struct server_info {
    std::string model;
    std::int64_t max_model_len = 0;  // 0 when the server does not say
};

// GET /v1/models: the first model and its usable context (`max_model_len`, else
// llama-server's GET /props `default_generation_settings.n_ctx`, else 0).
result<server_info> fetch_server_info(const endpoint& ep, std::chrono::milliseconds timeout);
// Pure parsers of those two answers (a missing context is 0).
result<server_info> parse_models(std::string_view body);
std::int64_t parse_props_context(std::string_view body);
// POST /tokenize {"prompt": text, "content": text, no special tokens} -> token ids;
// `tokens` may hold ids or {"id", "piece"} objects (llama-server's with_pieces).
result<std::vector<std::int64_t>> tokenize_remote(const endpoint& ep, const std::string& text,
                                                  std::chrono::milliseconds timeout);

using bench_clock = std::chrono::steady_clock;

// The server's own view of one request, from its timing log (net/timing_log.hpp),
// joined by request id: network edge, engine and device clocks, seconds.
struct server_timing {
    double edge_ttft_s = -1, edge_e2e_s = 0;  // first token / last byte written, since the request was read
    double tokenize_s = 0, flush_s = 0;
    double queue_s = 0, engine_ttft_s = 0, engine_e2e_s = 0;  // since the engine took the request
    bool has_device = false;                  // the log carries the device clock
    double device_s = 0, device_first_s = 0, device_wall_s = 0;
    std::int64_t device_steps = 0;
    std::int64_t completion_tokens = 0;
};

// Client-side record of one streamed completion; times in seconds since `origin`.
struct request_record {
    std::size_t index = 0;
    std::string server;     // which endpoint (label) served it
    int round = 0;          // --compare alternates servers in rounds
    bool warmup = false;
    bool ok = false;
    int http_status = 0;
    std::string error;
    std::string request_id;  // X-Request-Id or the chunk id
    std::int64_t prompt_tokens = 0;
    std::int64_t max_tokens = 0;
    std::int64_t completion_tokens = 0;  // usage, else token events
    std::int64_t server_prompt_tokens = -1;  // usage.prompt_tokens (-1: not reported); must equal prompt_tokens
    std::int64_t cached_tokens = -1;         // usage.prompt_tokens_details.cached_tokens (-1: not reported)
    int turn = 0;                            // --turns: the conversation turn it was (1..), else 0
    bool usage_completion = false;           // completion_tokens came from usage, not chunk counting
    bool saw_done = false;                   // the stream ended with `data: [DONE]`
    std::string finish_reason;
    double t_send = -1.0;
    double t_first_byte = -1.0;
    double t_first_token = -1.0;
    double t_done = -1.0;
    std::vector<double> token_times;
    bool join_tried = false;                 // a server log was given for this record's server
    std::optional<server_timing> joined;     // its line in that log, if found
};

struct stream_request {
    std::string model;
    std::vector<std::int64_t> prompt;
    std::int64_t max_tokens = 1;
    std::chrono::milliseconds timeout{600000};
    std::string response_format{};  // JSON object text sent as `response_format`; empty = none
    double temperature = 0.0;       // 0: greedy; above 0 the request also carries `seed`
    std::uint64_t seed = 0;         // the request's sampling seed (sent only with a temperature)
};

// Sends one `stream: true` completion (ignore_eos, include_usage) and fills `rec`.
void stream_completion(const endpoint& ep, const stream_request& req, bench_clock::time_point origin,
                       request_record& rec);

}  // namespace calserve::loadgen
