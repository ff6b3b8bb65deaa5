// write_file_atomically (atomic_file.hpp): temp file, fsync, rename, fsync dir.
#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace calserve::io {

namespace {

error_info io_failure(const std::string& what, const std::filesystem::path& p) {
    return make_error(status::io_error, what + " " + p.string() + ": " + std::strerror(errno));
}

void_result write_all(int fd, std::string_view content, const std::filesystem::path& p) {
    while (!content.empty()) {
        auto n = ::write(fd, content.data(), content.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return io_failure("cannot write", p);
        content.remove_prefix(std::size_t(n));
    }
    return {};
}

}  // namespace

void_result write_file_atomically(const std::filesystem::path& file, std::string_view content) {
    static std::atomic<unsigned> counter{0};
    const auto dir = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const auto tmp = dir / (file.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                            std::to_string(counter.fetch_add(1)));
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return io_failure("cannot create", tmp);
    auto written = write_all(fd, content, tmp);
    if (written && ::fsync(fd) != 0) written = io_failure("cannot fsync", tmp);
    if (::close(fd) != 0 && written) written = io_failure("cannot close", tmp);
    if (written && ::rename(tmp.c_str(), file.c_str()) != 0) written = io_failure("cannot rename onto", file);
    if (!written) {
        ::unlink(tmp.c_str());
        return written;
    }
    if (int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
        (void)::fsync(d);
        ::close(d);
    }
    return {};
}

}  // namespace calserve::io
