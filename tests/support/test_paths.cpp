#include "tests/support/test_paths.hpp"

#include <atomic>
#include <cstdlib>
#include <unistd.h>

namespace calserve::test {
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
    return dir;
}
}  // namespace calserve::test
