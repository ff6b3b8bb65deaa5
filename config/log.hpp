#pragma once
//! Logging set-up: spdlog, one line per event, level from config ("log.level").
//! Hot loops never log; actors log state transitions and faults.
#include <string_view>

#include "config/result.hpp"

namespace calserve {
void_result init_logging(std::string_view level);
}
