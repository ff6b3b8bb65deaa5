#include "config/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace calserve {
void_result init_logging(std::string_view level) {
    auto lvl = spdlog::level::from_str(std::string(level));
    if (lvl == spdlog::level::off && level != "off")
        return make_error(status::invalid_argument, "unknown log level '" + std::string(level) + "'");
    static bool installed = false;
    if (!installed) {
        auto logger = spdlog::stderr_color_mt("calserve");
        spdlog::set_default_logger(logger);
        spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
        installed = true;
    }
    spdlog::set_level(lvl);
    return {};
}
}  // namespace calserve
