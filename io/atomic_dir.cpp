#include "io/atomic_dir.hpp"

#include <atomic>
#include <string>
#include <unistd.h>

namespace calserve::io {

namespace fs = std::filesystem;

void_result build_directory_atomically(const fs::path& dir, const std::function<bool(const fs::path&)>& complete,
                                       const std::function<void_result(const fs::path&)>& build) {
    if (complete(dir)) return {};
    static std::atomic<unsigned> counter{0};
    const fs::path tmp = dir.string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    std::error_code ec;
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (ec) return make_error(status::io_error, "cannot create " + tmp.string() + ": " + ec.message());
    if (auto r = build(tmp); !r) {
        fs::remove_all(tmp, ec);
        return r;
    }
    fs::rename(tmp, dir, ec);
    if (ec) {
        if (!complete(dir)) {  // a stale, incomplete directory from an interrupted run: replace it
            fs::remove_all(dir, ec);
            fs::rename(tmp, dir, ec);
        }
        std::error_code ignore;
        fs::remove_all(tmp, ignore);  // ours lost the race (or replaced the stale one: nothing left)
        if (!complete(dir))
            return make_error(status::io_error, "cannot publish " + dir.string() + ": " + ec.message());
    }
    return {};
}

}  // namespace calserve::io
