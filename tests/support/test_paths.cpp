#include "tests/support/test_paths.hpp"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <system_error>
#include <unistd.h>
#include <vector>

namespace calserve::test {
namespace {
std::mutex made_mutex;
std::vector<std::filesystem::path>& made_dirs() {
    static std::vector<std::filesystem::path> dirs;
    return dirs;
}
}  // namespace

std::filesystem::path source_dir() { return CALSERVE_SOURCE_DIR; }
std::filesystem::path binary_dir() { return CALSERVE_BINARY_DIR; }
std::filesystem::path calserve_binary() {
    if (const char* env = std::getenv("CALSERVE_BINARY")) return env;
    return binary_dir() / "calserve";
}
std::filesystem::path tokenizer_dir() {
    if (const char* env = std::getenv("CALSERVE_TOKENIZER_DIR")) return env;
    return source_dir() / ".cache" / "tokenizer-qwen3";
}
std::filesystem::path scratch_dir(const std::string& tag) {
    static std::atomic<int> counter{0};
    auto dir = binary_dir() / "test-scratch" /
               (tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::lock_guard lock(made_mutex);
    made_dirs().push_back(dir);
    return dir;
}

std::vector<std::filesystem::path> end_scratch(bool passed) {
    std::lock_guard lock(made_mutex);
    std::vector<std::filesystem::path> kept;
    const char* keep = std::getenv("CALSERVE_KEEP_SCRATCH");
    if (!passed || (keep && *keep && std::string(keep) != "0")) {
        kept.swap(made_dirs());
        return kept;
    }
    for (const auto& dir : made_dirs()) {
        std::error_code ec;  // a daemon a test left running may still hold files: best effort
        std::filesystem::remove_all(dir, ec);
    }
    made_dirs().clear();
    return kept;
}
}  // namespace calserve::test
