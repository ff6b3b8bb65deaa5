// Fault registry: arming, matching and counting (see fault_points.hpp).
#include "device/fault_points.hpp"

#include <algorithm>
#include <cmath>

namespace calserve::device {

std::string_view to_string(fault_point p) {
    switch (p) {
#define CALSERVE_FAULT_NAME(name, text) \
    case fault_point::name: return #name;
        CALSERVE_FAULT_POINTS(CALSERVE_FAULT_NAME)
#undef CALSERVE_FAULT_NAME
    }
    return "unknown";
}

std::string_view describe(fault_point p) {
    switch (p) {
#define CALSERVE_FAULT_TEXT(name, text) \
    case fault_point::name: return text;
        CALSERVE_FAULT_POINTS(CALSERVE_FAULT_TEXT)
#undef CALSERVE_FAULT_TEXT
    }
    return "unknown";
}

std::optional<fault_point> parse_fault_point(std::string_view name) {
    for (fault_point p : all_fault_points) {
        if (to_string(p) == name) return p;
    }
    return std::nullopt;
}

std::string_view to_string(arm_mode m) {
    switch (m) {
        case arm_mode::once: return "once";
        case arm_mode::count: return "count";
        case arm_mode::probability: return "probability";
        case arm_mode::always: return "always";
    }
    return "unknown";
}

std::optional<arm_mode> parse_arm_mode(std::string_view name) {
    for (arm_mode m : {arm_mode::once, arm_mode::count, arm_mode::probability, arm_mode::always}) {
        if (to_string(m) == name) return m;
    }
    return std::nullopt;
}

result<fault_spec> make_fault_spec(std::string_view point, std::string_view mode, std::int64_t count,
                                   double probability, std::uint64_t seed, double delay_ms, fault_match match) {
    auto p = parse_fault_point(point);
    if (!p) return make_error(status::invalid_argument, "unknown fault point: " + std::string(point));
    auto m = parse_arm_mode(mode);
    if (!m) return make_error(status::invalid_argument, "unknown arm mode: " + std::string(mode));
    return fault_spec{*p, *m, count, probability, seed, delay_ms, std::move(match)};
}

result<std::uint64_t> fault_registry::arm(fault_spec spec) {
    if (spec.mode == arm_mode::count && spec.count < 1)
        return make_error(status::invalid_argument, "count must be >= 1");
    if (spec.mode == arm_mode::probability &&
        (!std::isfinite(spec.probability) || spec.probability <= 0.0 || spec.probability > 1.0))
        return make_error(status::invalid_argument, "probability must be in (0, 1]");
    if (!std::isfinite(spec.delay_ms) || spec.delay_ms < 0.0)
        return make_error(status::invalid_argument, "delay_ms must be >= 0");
    std::lock_guard lock(mutex_);
    if (restricted_ && !consumed_[static_cast<std::size_t>(spec.point)]) {
        return make_error(status::unsupported, "fault point " + std::string(to_string(spec.point)) +
                                                   " cannot fire in this configuration (nothing here consumes it; "
                                                   "docs/faults.md)");
    }
    const std::uint64_t id = next_id_++;
    entry e;
    e.state.id = id;
    e.state.remaining = spec.mode == arm_mode::once ? 1 : spec.mode == arm_mode::count ? spec.count : -1;
    // Each arm gets its own stream so arming a second point never shifts the first one's pattern.
    const std::uint64_t seed = spec.seed != 0 ? spec.seed : seed_ * 0x9E3779B97F4A7C15ULL + id;
    e.rng.seed(seed);
    e.state.spec = std::move(spec);
    entries_.emplace(id, std::move(e));
    recount_live();
    return id;
}

void fault_registry::set_consumers(std::initializer_list<fault_point> points) {
    std::lock_guard lock(mutex_);
    restricted_ = true;
    for (auto& c : consumed_) c = false;
    for (auto p : points) consumed_[static_cast<std::size_t>(p)] = true;
}

void fault_registry::add_consumer(fault_point point) {
    std::lock_guard lock(mutex_);
    consumed_[static_cast<std::size_t>(point)] = true;
}

bool fault_registry::consumed(fault_point point) const {
    std::lock_guard lock(mutex_);
    return !restricted_ || consumed_[static_cast<std::size_t>(point)];
}

std::size_t fault_registry::clear() {
    std::lock_guard lock(mutex_);
    const std::size_t n = entries_.size();
    entries_.clear();
    recount_live();
    return n;
}

std::size_t fault_registry::clear(fault_point point) {
    std::lock_guard lock(mutex_);
    const std::size_t n = std::erase_if(entries_, [&](const auto& kv) { return kv.second.state.spec.point == point; });
    recount_live();
    return n;
}

std::size_t fault_registry::clear_id(std::uint64_t arm_id) {
    std::lock_guard lock(mutex_);
    const std::size_t n = entries_.erase(arm_id);
    recount_live();
    return n;
}

bool fault_registry::matches(const fault_match& m, const fault_site& site) const {
    if (m.chip && (*m.chip >= 32 || (site.chip_mask & (1u << *m.chip)) == 0)) return false;
    if (m.submodel && *m.submodel != site.submodel) return false;
    if (m.sequence && site.sequence != m.sequence &&
        std::find(site.sequences.begin(), site.sequences.end(), *m.sequence) == site.sequences.end())
        return false;
    // A site that does not know its request number (the daemon numbers requests by
    // their sequence) matches a request filter against its sequences.
    if (m.request && site.request != m.request &&
        (site.request || (site.sequence != m.request &&
                          std::find(site.sequences.begin(), site.sequences.end(), *m.request) == site.sequences.end())))
        return false;
    return true;
}

bool fault_registry::try_fire(entry& e) {
    if (e.state.spec.mode == arm_mode::probability) {
        std::uniform_real_distribution<double> u(0.0, 1.0);
        if (u(e.rng) >= e.state.spec.probability) return false;
    }
    if (e.state.remaining > 0) --e.state.remaining;
    ++e.state.fires;
    return true;
}

std::optional<fault_fire> fault_registry::check(fault_point point, const fault_site& site) {
    if (!any_armed()) return std::nullopt;
    std::lock_guard lock(mutex_);
    for (auto& [id, e] : entries_) {
        if (e.state.spec.point != point || e.state.exhausted() || !matches(e.state.spec.match, site)) continue;
        ++e.state.checks;
        if (!try_fire(e)) continue;
        ++total_fires_[static_cast<std::size_t>(point)];
        if (e.state.exhausted()) recount_live();
        fault_fire fire{point, id, e.state.spec.delay_ms};
        if (observer_) observer_(fire);
        return fire;
    }
    return std::nullopt;
}

void fault_registry::set_fire_observer(fire_observer observer) {
    std::lock_guard lock(mutex_);
    observer_ = std::move(observer);
}

std::vector<armed_fault> fault_registry::list() const {
    std::lock_guard lock(mutex_);
    std::vector<armed_fault> out;
    out.reserve(entries_.size());
    for (const auto& [id, e] : entries_) out.push_back(e.state);
    return out;
}

std::uint64_t fault_registry::fires(fault_point point) const {
    std::lock_guard lock(mutex_);
    return total_fires_[static_cast<std::size_t>(point)];
}

void fault_registry::recount_live() {
    std::size_t n = 0;
    for (const auto& [id, e] : entries_) n += e.state.exhausted() ? 0 : 1;
    live_.store(n, std::memory_order_release);
}

}  // namespace calserve::device
