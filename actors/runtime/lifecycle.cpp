#include "actors/runtime/lifecycle.hpp"

#include <mutex>
#include <spdlog/spdlog.h>

namespace calserve::actors {
namespace {
std::atomic<std::uint64_t> g_illegal{0};
std::mutex g_handler_mutex;
illegal_transition_handler g_handler;
}  // namespace

std::uint64_t illegal_transitions_total() { return g_illegal.load(); }

void set_illegal_transition_handler(illegal_transition_handler handler) {
    std::lock_guard lock(g_handler_mutex);
    g_handler = std::move(handler);
}

void report_illegal_transition(std::string_view owner, std::string_view from, std::string_view to) {
    g_illegal.fetch_add(1);
    spdlog::error("illegal transition {}: {} -> {} (rejected)", owner, from, to);
    std::lock_guard lock(g_handler_mutex);
    if (g_handler) g_handler(owner, from, to);
}

void log_transition(std::string_view owner, std::string_view from, std::string_view to) {
    spdlog::info("{}: {} -> {}", owner, from, to);
}

}  // namespace calserve::actors
