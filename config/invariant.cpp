#include "config/invariant.hpp"

#include <spdlog/spdlog.h>

namespace calserve {
void invariant_failed(const char* expr, const std::string& message, std::source_location where) {
    std::string text = std::string("invariant violated: ") + expr + " (" + message + ") at " +
                       where.file_name() + ":" + std::to_string(where.line());
    spdlog::error("{}", text);
    throw invariant_violation(text);
}
}  // namespace calserve
