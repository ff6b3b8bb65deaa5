#pragma once
//! trace_writer: appends trace lines to a file off the hot path.
//!
//! Producers (the runtime's delivery hook, on actor strands) only format a line
//! and push it into a bounded in-memory queue under a short lock; one writer
//! thread drains the queue to the file in batches. When the queue is full the
//! record is dropped and counted, never waited for: tracing must not stall an
//! actor. A driver outside the actors (the deterministic soak/replay loop) may
//! call `wait_for_room` between steps to apply back-pressure where it is safe.
//!
//! Invariants: written + dropped == pushed after `close`; lines are written in
//! push order; `close` is idempotent and joins the thread.
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "config/result.hpp"

namespace calserve::io {

class trace_writer {
public:
    static result<std::unique_ptr<trace_writer>> open(const std::string& path, std::size_t capacity = 1 << 16);
    ~trace_writer();
    trace_writer(const trace_writer&) = delete;
    trace_writer& operator=(const trace_writer&) = delete;

    // Never blocks on I/O: queues the line or counts it dropped.
    void push(std::string line);
    // Blocks the caller until the queue is at most half full (drivers only).
    void wait_for_room();
    // Flushes everything queued, closes the file, joins the writer thread.
    void_result close();

    std::uint64_t dropped() const;
    std::uint64_t written() const;

private:
    trace_writer(std::FILE* file, std::size_t capacity);
    void run();

    std::FILE* file_;
    std::size_t capacity_;
    mutable std::mutex mutex_;
    std::condition_variable wake_writer_, room_;
    std::deque<std::string> queue_;
    std::uint64_t dropped_ = 0, written_ = 0;
    bool closing_ = false, io_error_ = false;
    std::thread thread_;
};

}  // namespace calserve::io
