// io_uring chunked reader with a pread fallback; see file_reader.hpp.
#include "io/file_reader.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace calserve::io {
namespace {

std::string os_error(int err) { return std::strerror(err); }

// Owns a file descriptor; closes it on every path out.
class fd_guard {
public:
    explicit fd_guard(int fd) : fd_(fd) {}
    fd_guard(const fd_guard&) = delete;
    fd_guard& operator=(const fd_guard&) = delete;
    ~fd_guard() {
        if (fd_ >= 0) ::close(fd_);
    }
    int get() const { return fd_; }

private:
    int fd_;
};

result<int> open_read(const std::filesystem::path& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        status code = err == ENOENT ? status::not_found : status::io_error;
        return make_error(code, "cannot open " + path.string() + ": " + os_error(err));
    }
    return fd;
}

error_info short_read(const std::filesystem::path& path, std::uint64_t at, std::uint64_t wanted_end) {
    return make_error(status::io_error, "short read: " + path.string() + " ended at byte " + std::to_string(at) +
                                            " before byte " + std::to_string(wanted_end));
}

void_result pread_all(int fd, const std::filesystem::path& path, std::uint64_t offset, std::span<std::byte> out,
                      const read_options& opts, read_report& rep) {
    std::size_t done = 0;
    const std::size_t chunk = std::max<std::size_t>(opts.chunk_bytes, 4096);
    while (done < out.size()) {
        std::size_t n = std::min(chunk, out.size() - done);
        ssize_t got = ::pread(fd, out.data() + done, n, static_cast<off_t>(offset + done));
        ++rep.requests;
        if (got < 0) {
            if (errno == EINTR) continue;
            return make_error(status::io_error, "pread " + path.string() + " at " + std::to_string(offset + done) +
                                                    ": " + os_error(errno));
        }
        if (got == 0) return short_read(path, offset + done, offset + out.size());
        done += static_cast<std::size_t>(got);
    }
    rep.backend = read_backend::pread;
    rep.bytes += out.size();
    return {};
}

// One outstanding read: the slice [pos, end) of the destination still to fill.
struct slot {
    std::size_t pos = 0;
    std::size_t end = 0;
    bool busy = false;
};

class uring_reader {
public:
    uring_reader(int fd, const std::filesystem::path& path, std::uint64_t offset, std::span<std::byte> out,
                 const read_options& opts)
        : fd_(fd), path_(path), offset_(offset), out_(out), chunk_(std::max<std::size_t>(opts.chunk_bytes, 4096)),
          slots_(std::clamp(opts.queue_depth, 1u, 64u)) {}

    ~uring_reader() {
        if (ready_) io_uring_queue_exit(&ring_);
    }

    // False when the ring cannot be created: the caller falls back to pread.
    bool setup() {
        ready_ = io_uring_queue_init(static_cast<unsigned>(slots_.size()), &ring_, 0) == 0;
        return ready_;
    }

    void_result run(read_report& rep) {
        std::size_t inflight = 0;
        while (next_ < out_.size() || inflight > 0) {
            while (next_ < out_.size() && inflight < slots_.size()) {
                std::size_t idx = free_slot();
                slots_[idx] = slot{next_, std::min(out_.size(), next_ + chunk_), true};
                next_ = slots_[idx].end;
                if (auto r = submit(idx); !r) return drain(inflight + 1, r.error());
                ++inflight;
                ++rep.requests;
            }
            if (int rc = io_uring_submit(&ring_); rc < 0)
                return drain(inflight, make_error(status::io_error, "io_uring_submit: " + os_error(-rc)));
            io_uring_cqe* cqe = nullptr;
            int rc = io_uring_wait_cqe(&ring_, &cqe);
            if (rc == -EINTR) continue;
            if (rc < 0) return drain(inflight, make_error(status::io_error, "io_uring_wait_cqe: " + os_error(-rc)));
            auto idx = static_cast<std::size_t>(io_uring_cqe_get_data64(cqe));
            int res = cqe->res;
            io_uring_cqe_seen(&ring_, cqe);
            --inflight;
            if (auto r = complete(idx, res, inflight, rep); !r) return drain(inflight, r.error());
        }
        rep.backend = read_backend::io_uring;
        rep.bytes += out_.size();
        return {};
    }

private:
    std::size_t free_slot() const {
        for (std::size_t i = 0; i < slots_.size(); ++i)
            if (!slots_[i].busy) return i;
        return 0;  // unreachable: callers keep inflight < slots
    }

    void_result submit(std::size_t idx) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (sqe == nullptr) return make_error(status::io_error, "io_uring submission queue full");
        slot& s = slots_[idx];
        io_uring_prep_read(sqe, fd_, out_.data() + s.pos, static_cast<unsigned>(s.end - s.pos), offset_ + s.pos);
        io_uring_sqe_set_data64(sqe, idx);
        return {};
    }

    // A completion either finishes its slot, or (short read) resubmits the rest.
    void_result complete(std::size_t idx, int res, std::size_t& inflight, read_report& rep) {
        slot& s = slots_[idx];
        const bool retry = res == -EINTR || res == -EAGAIN;  // resubmit the same slice
        if (!retry && res < 0)
            return make_error(status::io_error, "io_uring read " + path_.string() + " at " +
                                                    std::to_string(offset_ + s.pos) + ": " + os_error(-res));
        if (res == 0) return short_read(path_, offset_ + s.pos, offset_ + out_.size());
        if (!retry) s.pos += static_cast<std::size_t>(res);
        if (s.pos >= s.end) {
            s.busy = false;
            return {};
        }
        if (auto r = submit(idx); !r) return r;
        ++inflight;
        ++rep.requests;
        return {};
    }

    // Waits for reads still in flight so the kernel never writes after we return.
    error_info drain(std::size_t inflight, error_info err) {
        io_uring_submit(&ring_);
        while (inflight > 0) {
            io_uring_cqe* cqe = nullptr;
            int rc = io_uring_wait_cqe(&ring_, &cqe);
            if (rc == -EINTR) continue;
            if (rc < 0) break;
            io_uring_cqe_seen(&ring_, cqe);
            --inflight;
        }
        return err;
    }

    int fd_;
    const std::filesystem::path& path_;
    std::uint64_t offset_;
    std::span<std::byte> out_;
    std::size_t chunk_;
    std::vector<slot> slots_;
    std::size_t next_ = 0;
    io_uring ring_{};
    bool ready_ = false;
};

void_result read_fd(int fd, const std::filesystem::path& path, std::uint64_t offset, std::span<std::byte> out,
                    const read_options& opts, read_report& rep) {
    if (out.empty()) return {};
    if (opts.backend != read_backend::pread) {
        uring_reader reader(fd, path, offset, out, opts);
        if (reader.setup()) return reader.run(rep);
        if (opts.backend == read_backend::io_uring)
            return make_error(status::io_error, "io_uring unavailable and backend io_uring was forced");
    }
    return pread_all(fd, path, offset, out, opts, rep);
}

result<std::uint64_t> fd_size(int fd, const std::filesystem::path& path) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return make_error(status::io_error, "stat " + path.string() + ": " + os_error(errno));
    if (!S_ISREG(st.st_mode)) return make_error(status::io_error, path.string() + " is not a regular file");
    return static_cast<std::uint64_t>(st.st_size);
}

}  // namespace

std::string_view to_string(read_backend b) {
    switch (b) {
        case read_backend::automatic: return "automatic";
        case read_backend::io_uring: return "io_uring";
        case read_backend::pread: return "pread";
    }
    return "unknown";
}

bool io_uring_available() {
    static const bool available = [] {
        io_uring ring{};
        if (io_uring_queue_init(2, &ring, 0) != 0) return false;
        io_uring_queue_exit(&ring);
        return true;
    }();
    return available;
}

result<std::uint64_t> file_size(const std::filesystem::path& path) {
    auto fd = open_read(path);
    if (!fd) return fd.error();
    fd_guard guard(*fd);
    return fd_size(guard.get(), path);
}

result<std::vector<std::byte>> read_file(const std::filesystem::path& path, const read_options& opts,
                                         read_report* report) {
    auto fd = open_read(path);
    if (!fd) return fd.error();
    fd_guard guard(*fd);
    auto size = fd_size(guard.get(), path);
    if (!size) return size.error();
    std::vector<std::byte> data(*size);
    read_report local;
    if (auto r = read_fd(guard.get(), path, 0, data, opts, report ? *report : local); !r) return r.error();
    return data;
}

void_result read_range(const std::filesystem::path& path, std::uint64_t offset, std::span<std::byte> out,
                       const read_options& opts, read_report* report) {
    auto fd = open_read(path);
    if (!fd) return fd.error();
    fd_guard guard(*fd);
    auto size = fd_size(guard.get(), path);
    if (!size) return size.error();
    if (offset + out.size() > *size) return short_read(path, *size, offset + out.size());
    read_report local;
    return read_fd(guard.get(), path, offset, out, opts, report ? *report : local);
}

}  // namespace calserve::io
