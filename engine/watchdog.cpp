#include "engine/watchdog.hpp"

namespace calserve::engine {

bool progress_watchdog::stalled(std::chrono::nanoseconds now, std::int64_t in_flight) const {
    if (bound_.count() <= 0 || in_flight <= 0) return false;
    return since_progress(now) > bound_;
}

void mailbox_watch::add(mailbox_probe probe) {
    std::lock_guard lock(mutex_);
    watched w;
    w.last_delivered = probe.delivered ? probe.delivered() : 0;
    w.probe = std::move(probe);
    watched_.push_back(std::move(w));
}

std::vector<std::string> mailbox_watch::check() {
    std::lock_guard lock(mutex_);
    std::vector<std::string> stuck;
    for (auto& w : watched_) {
        auto delivered = w.probe.delivered();
        auto queued = w.probe.queued();
        // Stuck: messages were already waiting at the previous check, are still
        // waiting, and none was handled in between.
        if (w.had_queue && queued > 0 && delivered == w.last_delivered) stuck.push_back(w.probe.name);
        w.had_queue = queued > 0;
        w.last_delivered = delivered;
    }
    return stuck;
}

}  // namespace calserve::engine
