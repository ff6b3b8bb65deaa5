#pragma once
//! trace_writer: appends trace lines to a file off the hot path.
//!
//! Role: producers (the runtime's delivery hook on actor strands, the soak
//! driver) format a line and `push` it into a bounded in-memory queue under a
//! short lock. One writer thread takes the whole queue at once, packs lines into
//! one of two large buffers (`batch_bytes`, 1 MiB by default) and writes each
//! buffer at its own explicit file offset: with io_uring (IORING_OP_WRITE, at
//! most two writes in flight, one buffer filling while the other is written), or
//! with a plain pwrite loop when io_uring cannot be set up (old kernel, seccomp,
//! container policy) or is switched off (`write_backend::pwrite`, or
//! CALSERVE_TRACE_WRITER=pwrite in the environment). The backend in use is
//! logged once per process and reported by `backend()`.
//!
//! Fault model: a full queue drops the record and counts it, never waits:
//! tracing must not stall an actor. A driver outside the actors (the
//! deterministic soak/replay loop) may call `wait_for_room` between steps to
//! apply back-pressure where it is safe. A short write is resubmitted for its
//! remainder. A write error (ENOSPC, EFBIG, EIO...) stops writing: every line
//! not yet fully on disk is counted dropped and `close` returns the first error
//! (io_error, naming the path, the offset and the OS error). `open` fails with a
//! clear error when the file cannot be created.
//!
//! Invariants: written + dropped == pushed after `close`; lines reach the file
//! whole, newline terminated, in push order; on success the file holds exactly
//! `bytes_written()` bytes; `close` is idempotent and joins the thread. Memory:
//! at most `capacity` queued lines, plus one taken batch and two buffers held by
//! the writer.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "config/result.hpp"

namespace calserve::io {

enum class write_backend : std::uint8_t { automatic, io_uring, pwrite };

std::string_view to_string(write_backend b);

struct trace_writer_options {
    std::size_t capacity = 1 << 16;  // queued lines; `push` drops beyond this
    // automatic: $CALSERVE_TRACE_WRITER (auto|io_uring|pwrite) if set, else
    // io_uring with the pwrite fallback. Forcing io_uring fails `open` when it
    // cannot be set up.
    write_backend backend = write_backend::automatic;
    std::size_t batch_bytes = 1u << 20;  // one write request (a longer line is written whole)
    bool sync_on_close = false;          // fdatasync before `close` returns
    bool start_paused = false;           // tests: the writer takes nothing until `resume` or `close`
};

class trace_writer {
public:
    static result<std::unique_ptr<trace_writer>> open(const std::string& path, std::size_t capacity = 1 << 16);
    static result<std::unique_ptr<trace_writer>> open(const std::string& path, const trace_writer_options& opts);
    ~trace_writer();
    trace_writer(const trace_writer&) = delete;
    trace_writer& operator=(const trace_writer&) = delete;

    // Never blocks on I/O: queues the line or counts it dropped.
    void push(std::string line);
    // Blocks the caller until the queue is at most half full (drivers only;
    // never returns while the writer is paused and the queue is full).
    void wait_for_room();
    // Lets a writer opened with `start_paused` run.
    void resume();
    // Flushes everything queued, closes the file, joins the writer thread.
    void_result close();

    std::uint64_t dropped() const;
    std::uint64_t written() const;        // lines fully on disk
    std::uint64_t bytes_written() const;  // bytes the kernel accepted
    std::string_view backend() const;     // "io_uring" or "pwrite"

private:
    class sink;
    struct out_buffer;

    trace_writer(std::unique_ptr<sink> s, const trace_writer_options& opts);
    void run();
    bool take_lines(std::deque<std::string>& lines, bool block);
    void fill_buffer(std::deque<std::string>& lines, out_buffer& buf);
    void submit(out_buffer& buf);
    void reap_one(out_buffer* bufs, std::size_t count);
    void finish_buffer(out_buffer& buf, const void_result& status);

    std::unique_ptr<sink> sink_;
    std::size_t capacity_, batch_bytes_;
    bool sync_on_close_;
    mutable std::mutex mutex_;
    std::condition_variable wake_writer_, room_;
    std::deque<std::string> queue_;  // guarded by mutex_; size() <= capacity_
    bool closing_ = false, closed_ = false, paused_ = false;  // guarded by mutex_
    std::atomic<std::uint64_t> dropped_{0}, written_{0}, bytes_written_{0};
    // Writer thread only (read by `close` after the join).
    std::uint64_t next_offset_ = 0;
    std::size_t inflight_ = 0;  // io_uring writes submitted and not reaped, <= 2
    std::optional<error_info> error_;
    std::thread thread_;
};

}  // namespace calserve::io
