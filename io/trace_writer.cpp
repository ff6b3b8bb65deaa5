// Bounded, drop-counting trace writer: io_uring double-buffered writes with a
// pwrite fallback; see trace_writer.hpp.
#include "io/trace_writer.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace calserve::io {
namespace {

constexpr std::size_t buffer_count = 2;  // double buffering: at most two writes in flight
constexpr unsigned ring_entries = 4;     // > buffer_count, so a free SQE always exists
static_assert(ring_entries > buffer_count);

std::string os_error(int err) { return std::strerror(err); }

result<write_backend> resolve_backend(write_backend wanted) {
    if (wanted != write_backend::automatic) return wanted;
    const char* env = std::getenv("CALSERVE_TRACE_WRITER");
    std::string_view v = env ? env : "";
    if (v.empty() || v == "auto") return write_backend::automatic;
    if (v == "io_uring") return write_backend::io_uring;
    if (v == "pwrite") return write_backend::pwrite;
    return make_error(status::invalid_argument,
                      "CALSERVE_TRACE_WRITER must be auto, io_uring or pwrite, not \"" + std::string(v) + "\"");
}

// Logs the first use of each backend in this process.
void log_backend_once(write_backend b, const std::string& why) {
    static std::atomic<unsigned> logged{0};
    const unsigned bit = 1u << static_cast<unsigned>(b);
    if (logged.fetch_or(bit) & bit) return;
    spdlog::info("trace writer: {} backend{}", to_string(b), why);
}

}  // namespace

// A run of whole lines and where it goes in the file.
struct trace_writer::out_buffer {
    std::string bytes;
    std::uint64_t offset = 0;  // file offset of bytes[0]
    std::size_t done = 0;      // bytes the kernel has accepted, <= bytes.size()
    std::uint64_t lines = 0;   // lines in `bytes`
    bool busy = false;         // an io_uring write of it is in flight
};

// The file descriptor and, when available, the ring; raw writes only.
class trace_writer::sink {
public:
    struct reaped {
        out_buffer* buf = nullptr;  // null: the ring itself failed
        void_result status;
    };

    explicit sink(std::string path) : path_(std::move(path)) {}
    sink(const sink&) = delete;
    sink& operator=(const sink&) = delete;
    ~sink() {
        if (ring_ready_) io_uring_queue_exit(&ring_);
        if (fd_ >= 0) ::close(fd_);
    }

    // 0, or the negative errno io_uring_queue_init returned.
    int setup_ring() {
        int rc = io_uring_queue_init(ring_entries, &ring_, 0);
        ring_ready_ = rc == 0;
        return rc;
    }
    bool uring() const { return ring_ready_; }
    write_backend backend() const { return ring_ready_ ? write_backend::io_uring : write_backend::pwrite; }
    const std::string& path() const { return path_; }

    void_result open_file() {
        fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd_ < 0) return make_error(status::io_error, "trace: cannot create " + path_ + ": " + os_error(errno));
        return {};
    }

    // io_uring: submits the write of the unwritten rest of `b` (busy on success).
    // pwrite: writes it all before returning.
    void_result start(out_buffer& b) { return ring_ready_ ? submit(b) : pwrite_all(b); }

    // io_uring only: waits until one buffer is fully written or has failed,
    // resubmitting short writes on the way.
    reaped reap() {
        while (true) {
            io_uring_cqe* cqe = nullptr;
            int rc = io_uring_wait_cqe(&ring_, &cqe);
            if (rc == -EINTR) continue;
            if (rc < 0) return {nullptr, make_error(status::io_error, "trace: io_uring_wait_cqe: " + os_error(-rc))};
            auto* b = static_cast<out_buffer*>(io_uring_cqe_get_data(cqe));
            const int res = cqe->res;
            io_uring_cqe_seen(&ring_, cqe);
            b->busy = false;
            if (res < 0 && res != -EINTR && res != -EAGAIN) return {b, write_error(*b, -res)};
            if (res == 0) return {b, write_error(*b, ENOSPC)};
            if (res > 0) b->done += static_cast<std::size_t>(res);
            if (b->done == b->bytes.size()) return {b, {}};
            if (auto s = submit(*b); !s) return {b, s};  // the remainder, or a retry
        }
    }

    void_result finish(bool sync) {
        int err = 0;
        if (sync && ::fdatasync(fd_) != 0) err = errno;
        if (::close(fd_) != 0 && err == 0) err = errno;
        fd_ = -1;
        if (err != 0) return make_error(status::io_error, "trace: closing " + path_ + ": " + os_error(err));
        return {};
    }

private:
    error_info write_error(const out_buffer& b, int err) const {
        return make_error(status::io_error,
                          "trace: write " + path_ + " at byte " + std::to_string(b.offset + b.done) + ": " + os_error(err));
    }

    void_result submit(out_buffer& b) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (sqe == nullptr) return make_error(status::io_error, "trace: io_uring submission queue full");
        io_uring_prep_write(sqe, fd_, b.bytes.data() + b.done, static_cast<unsigned>(b.bytes.size() - b.done),
                            b.offset + b.done);
        io_uring_sqe_set_data(sqe, &b);
        if (int rc = io_uring_submit(&ring_); rc < 0)
            return make_error(status::io_error, "trace: io_uring_submit: " + os_error(-rc));
        b.busy = true;
        return {};
    }

    void_result pwrite_all(out_buffer& b) {
        while (b.done < b.bytes.size()) {
            ssize_t n = ::pwrite(fd_, b.bytes.data() + b.done, b.bytes.size() - b.done,
                                 static_cast<off_t>(b.offset + b.done));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) return write_error(b, errno);
            if (n == 0) return write_error(b, ENOSPC);
            b.done += static_cast<std::size_t>(n);
        }
        return {};
    }

    std::string path_;
    int fd_ = -1;
    io_uring ring_{};
    bool ring_ready_ = false;
};

std::string_view to_string(write_backend b) {
    switch (b) {
        case write_backend::automatic: return "automatic";
        case write_backend::io_uring: return "io_uring";
        case write_backend::pwrite: return "pwrite";
    }
    return "unknown";
}

result<std::unique_ptr<trace_writer>> trace_writer::open(const std::string& path, std::size_t capacity) {
    trace_writer_options opts;
    opts.capacity = capacity;
    return open(path, opts);
}

result<std::unique_ptr<trace_writer>> trace_writer::open(const std::string& path, const trace_writer_options& opts) {
    auto wanted = resolve_backend(opts.backend);
    if (!wanted) return wanted.error();
    auto s = std::make_unique<sink>(path);
    std::string why;
    if (*wanted != write_backend::pwrite) {
        if (int rc = s->setup_ring(); rc < 0) {
            if (*wanted == write_backend::io_uring)
                return make_error(status::io_error, "trace: io_uring was required but cannot be set up: " + os_error(-rc));
            why = " (io_uring unavailable: " + os_error(-rc) + ")";
        }
    } else {
        why = " (forced)";
    }
    if (auto r = s->open_file(); !r) return r.error();
    log_backend_once(s->backend(), why);
    return std::unique_ptr<trace_writer>(new trace_writer(std::move(s), opts));
}

trace_writer::trace_writer(std::unique_ptr<sink> s, const trace_writer_options& opts)
    : sink_(std::move(s)), capacity_(opts.capacity == 0 ? 1 : opts.capacity),
      batch_bytes_(opts.batch_bytes == 0 ? 1 : opts.batch_bytes), sync_on_close_(opts.sync_on_close),
      paused_(opts.start_paused), thread_([this] { run(); }) {}

trace_writer::~trace_writer() { (void)close(); }

void trace_writer::push(std::string line) {
    bool was_empty = false;
    {
        std::lock_guard lock(mutex_);
        if (closing_ || queue_.size() >= capacity_) {
            dropped_.fetch_add(1, std::memory_order_relaxed);
            return;
        }
        was_empty = queue_.empty();
        queue_.push_back(std::move(line));
    }
    // The writer only sleeps on an empty queue (or while paused, which resume()
    // ends with its own notify), so only the first line needs to wake it.
    if (was_empty) wake_writer_.notify_one();
}

void trace_writer::wait_for_room() {
    std::unique_lock lock(mutex_);
    room_.wait(lock, [&] { return closing_ || queue_.size() <= capacity_ / 2; });
}

void trace_writer::resume() {
    {
        std::lock_guard lock(mutex_);
        paused_ = false;
    }
    wake_writer_.notify_all();
}

// Moves the whole queue into `lines` (which is empty). With `block`, waits for
// lines first and returns false once closing with nothing left.
bool trace_writer::take_lines(std::deque<std::string>& lines, bool block) {
    std::unique_lock lock(mutex_);
    if (block) {
        wake_writer_.wait(lock, [&] { return closing_ || (!paused_ && !queue_.empty()); });
        if (queue_.empty()) return false;
    } else if (paused_ && !closing_) {
        return true;
    }
    lines.swap(queue_);
    lock.unlock();
    room_.notify_all();
    return true;
}

// Packs taken lines (taking more while there is room) into `buf`, or, after a
// write error, counts them dropped.
void trace_writer::fill_buffer(std::deque<std::string>& lines, out_buffer& buf) {
    while (true) {
        if (lines.empty()) take_lines(lines, false);
        if (lines.empty()) return;
        if (error_) {
            dropped_.fetch_add(lines.size(), std::memory_order_relaxed);
            lines.clear();
            continue;
        }
        const std::string& line = lines.front();
        if (!buf.bytes.empty() && buf.bytes.size() + line.size() + 1 > batch_bytes_) return;
        buf.bytes.append(line);
        buf.bytes.push_back('\n');
        ++buf.lines;
        lines.pop_front();
    }
}

void trace_writer::submit(out_buffer& buf) {
    buf.offset = next_offset_;
    next_offset_ += buf.bytes.size();
    auto started = sink_->start(buf);
    if (buf.busy) {
        ++inflight_;
        return;
    }
    finish_buffer(buf, started);  // pwrite finished it, or io_uring could not start it
}

void trace_writer::reap_one(out_buffer* bufs, std::size_t count) {
    auto r = sink_->reap();
    if (r.buf != nullptr) {
        --inflight_;
        finish_buffer(*r.buf, r.status);
        return;
    }
    // The ring itself failed: nothing in flight can be trusted any more.
    for (std::size_t i = 0; i < count; ++i)
        if (bufs[i].busy) finish_buffer(bufs[i], r.status);
    inflight_ = 0;
}

void trace_writer::finish_buffer(out_buffer& buf, const void_result& status) {
    bytes_written_.fetch_add(buf.done, std::memory_order_relaxed);
    if (status) {
        written_.fetch_add(buf.lines, std::memory_order_relaxed);
    } else {
        dropped_.fetch_add(buf.lines, std::memory_order_relaxed);
        if (!error_) error_ = status.error();
    }
    buf.bytes.clear();
    buf.done = 0;
    buf.lines = 0;
    buf.busy = false;
}

// The writer loop: fill the free buffer, write it, and wait for a write only
// when both buffers are in flight or there is nothing else to do.
void trace_writer::run() {
    std::deque<std::string> lines;  // taken from queue_, not yet in a buffer
    std::array<out_buffer, buffer_count> bufs;
    for (auto& b : bufs) b.bytes.reserve(batch_bytes_);
    std::size_t fill = 0;
    while (true) {
        out_buffer& cur = bufs[fill];
        if (cur.busy) {
            reap_one(bufs.data(), bufs.size());
            continue;
        }
        fill_buffer(lines, cur);
        if (!cur.bytes.empty()) {
            submit(cur);
            fill = (fill + 1) % bufs.size();
            continue;
        }
        if (inflight_ > 0) {
            reap_one(bufs.data(), bufs.size());
            continue;
        }
        if (!take_lines(lines, true)) break;
    }
}

void_result trace_writer::close() {
    {
        std::lock_guard lock(mutex_);
        if (closed_) return {};
        closed_ = true;
        closing_ = true;
    }
    wake_writer_.notify_all();
    room_.notify_all();
    if (thread_.joinable()) thread_.join();
    auto finished = sink_->finish(sync_on_close_);
    if (error_) return *error_;
    return finished;
}

std::uint64_t trace_writer::dropped() const { return dropped_.load(std::memory_order_relaxed); }
std::uint64_t trace_writer::written() const { return written_.load(std::memory_order_relaxed); }
std::uint64_t trace_writer::bytes_written() const { return bytes_written_.load(std::memory_order_relaxed); }
std::string_view trace_writer::backend() const { return to_string(sink_->backend()); }

}  // namespace calserve::io
