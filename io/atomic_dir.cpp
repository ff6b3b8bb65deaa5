#include "io/atomic_dir.hpp"

#include <atomic>
#include <fcntl.h>
#include <string>
#include <sys/file.h>
#include <unistd.h>

namespace calserve::io {

namespace fs = std::filesystem;

namespace {
// An exclusive flock(2) on `<dir>.lock` for the scope (one per open file description, so
// it orders threads of one process as well as processes).
class dir_lock {
public:
    explicit dir_lock(const fs::path& dir) {
        fd_ = ::open((dir.string() + ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
        if (fd_ < 0) return;
        while (::flock(fd_, LOCK_EX) != 0) {
            if (errno != EINTR) {
                ::close(fd_);
                fd_ = -1;
                return;
            }
        }
    }
    ~dir_lock() {
        if (fd_ >= 0) ::close(fd_);  // closing releases the lock
    }
    dir_lock(const dir_lock&) = delete;
    dir_lock& operator=(const dir_lock&) = delete;
    bool held() const { return fd_ >= 0; }

private:
    int fd_ = -1;
};
}  // namespace

void_result build_directory_atomically(const fs::path& dir, const std::function<bool(const fs::path&)>& complete,
                                       const std::function<void_result(const fs::path&)>& build) {
    if (complete(dir)) return {};
    std::error_code ec;
    if (dir.has_parent_path()) fs::create_directories(dir.parent_path(), ec);
    dir_lock lock(dir);
    if (!lock.held()) return make_error(status::io_error, "cannot lock " + dir.string() + ".lock");
    if (complete(dir)) return {};  // another builder finished while this one waited
    static std::atomic<unsigned> counter{0};
    const fs::path tmp = dir.string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (ec) return make_error(status::io_error, "cannot create " + tmp.string() + ": " + ec.message());
    if (auto r = build(tmp); !r) {
        fs::remove_all(tmp, ec);
        return r;
    }
    // Under the lock, a directory still here is stale (an interrupted run, an older format):
    // nobody else can be publishing, so it is replaced.
    fs::remove_all(dir, ec);
    fs::rename(tmp, dir, ec);
    if (ec) {
        std::error_code ignore;
        fs::remove_all(tmp, ignore);
        return make_error(status::io_error, "cannot publish " + dir.string() + ": " + ec.message());
    }
    return {};
}

}  // namespace calserve::io
