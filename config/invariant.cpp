#include "config/invariant.hpp"

#include <spdlog/spdlog.h>

namespace calserve {
void invariant_failed(const char* expr, const std::string& message, const char* file, int line) {
    std::string text = std::string("invariant violated: ") + expr + " (" + message + ") at " +
                       file + ":" + std::to_string(line);
    spdlog::error("{}", text);
    throw invariant_violation(text);
}
}  // namespace calserve
