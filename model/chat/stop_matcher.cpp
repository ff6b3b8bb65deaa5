// Streaming stop-string matcher (see the header for the contract).
#include "model/chat/stop_matcher.hpp"

#include <algorithm>
#include <utility>

namespace calserve::model {

stop_matcher::stop_matcher(std::vector<std::string> stops) {
    for (std::size_t i = 0; i < stops.size(); ++i) {
        if (stops[i].empty()) continue;
        stops_.push_back(std::move(stops[i]));
        stop_ids_.push_back(i);
    }
}

stop_push_result stop_matcher::push(std::string_view delta) {
    if (stopped_) return {{}, true, stop_index_};
    held_.append(delta);
    const std::string_view text = held_;
    // The held text holds no complete stop string, so any match involves the delta;
    // the earliest end wins (the answer does not depend on how the text was chunked).
    std::size_t best_end = std::string_view::npos;
    std::size_t best_start = 0;
    for (std::size_t s = 0; s < stops_.size(); ++s) {
        const std::size_t pos = text.find(stops_[s]);
        if (pos == std::string_view::npos) continue;
        const std::size_t end = pos + stops_[s].size();
        if (end < best_end || (end == best_end && pos < best_start)) {
            best_end = end;
            best_start = pos;
            stop_index_ = stop_ids_[s];
        }
    }
    if (best_end != std::string_view::npos) {
        stopped_ = true;
        stop_push_result out{std::string(text.substr(0, best_start)), true, stop_index_};
        held_.clear();
        return out;
    }
    const std::size_t keep = hold_length(text);
    stop_push_result out{std::string(text.substr(0, text.size() - keep)), false, 0};
    held_.erase(0, text.size() - keep);
    return out;
}

std::string stop_matcher::flush() {
    if (stopped_) return {};
    return std::exchange(held_, {});
}

std::size_t stop_matcher::hold_length(std::string_view text) const {
    std::size_t best = 0;
    for (const std::string& stop : stops_) {
        const std::string_view s = stop;
        for (std::size_t len = std::min(text.size(), s.size() - 1); len > best; --len) {
            if (text.ends_with(s.substr(0, len))) {
                best = len;
                break;
            }
        }
    }
    return best;
}

}  // namespace calserve::model
