#pragma once
//! Per-request JSONL timing log (config `server.timing_log`): one line per API
//! generation request, written when its response is complete, joinable by `id`
//! with a client's own log (`calserve bench --server-log`). Times are seconds;
//! `received_unix` anchors the line. Three clocks per line: the network edge
//! (ttft_s, e2e_s: bytes written), the engine (queue/server_ttft/server_e2e) and
//! the device (device_s: modelled compute of the request's jobs).
//!
//! Fault model: the log is best effort. A failed open disables it with a warning
//! at start-up; a failed write is counted, never propagated into a request.
//! Invariant: lines are written whole (one mutex-guarded write + flush each).
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include "actors/engine.hpp"
#include "config/result.hpp"

namespace calserve::net {

struct timing_record {
    std::string id;
    std::string route;               // "completions", "chat", "ws"
    bool stream = false;
    unsigned http_status = 200;
    std::string finish_reason;
    std::int64_t prompt_tokens = 0;
    std::int64_t completion_tokens = 0;
    double received_unix = 0;        // wall clock when the request was read
    // Client-visible, measured where the bytes are written:
    double tokenize_s = 0;           // prompt preparation (template + encode)
    double ttft_s = -1;              // first token written (-1: none)
    double e2e_s = 0;                // last byte written
    double flush_s = 0;              // total time spent writing to the socket
    // Server phases reported by the engine:
    double queue_s = 0, server_ttft_s = 0, server_e2e_s = 0;
    // Device clock reported by the engine (see actors::generation_result):
    double device_s = 0, device_first_s = 0, device_wall_s = 0;
    std::int64_t device_steps = 0;
};

// Copies the engine's phase and device times (and token count) into `rec`.
void set_engine_times(timing_record& rec, const actors::generation_result& r);

class timing_log {
public:
    static result<std::unique_ptr<timing_log>> open(const std::string& path);
    ~timing_log();
    void write(const timing_record& r);
    std::uint64_t write_failures() const { return failures_; }

private:
    explicit timing_log(std::FILE* f) : file_(f) {}
    std::mutex mutex_;
    std::FILE* file_;                // guarded by mutex_
    std::uint64_t failures_ = 0;     // guarded by mutex_
};

}  // namespace calserve::net
