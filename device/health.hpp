#pragma once
//! The device's health lifecycle as the host sees it (distinct from `device_state`,
//! what the device reports of itself): the states, their names, and the number
//! each state reports as the `calserve_device_state` gauge. This table is the one
//! source of those facts: the DeviceActor (actors/device_actor.hpp, which holds the
//! legal transitions and their diagram) moves through these states, metrics/
//! reports them, /health and the console print their names.
//!
//! Invariant: a state's gauge code never changes (docs/metrics.md documents them
//! and deploy/prometheus' alert rules compare them), whatever the enum order; the
//! codes are 0..7, each used once.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace calserve::device {

// name, calserve_device_state code
#define CALSERVE_DEVICE_HEALTH(X) \
    X(unconfigured, 0)            \
    X(configuring, 1)             \
    X(warmup, 6)                  \
    X(ready, 2)                   \
    X(busy, 3)                    \
    X(faulted, 4)                 \
    X(resetting, 5)               \
    X(dead, 7)

enum class device_health : std::uint8_t {
#define CALSERVE_HEALTH_ENUM(name, code) name,
    CALSERVE_DEVICE_HEALTH(CALSERVE_HEALTH_ENUM)
#undef CALSERVE_HEALTH_ENUM
};

inline constexpr device_health all_device_health[] = {
#define CALSERVE_HEALTH_LIST(name, code) device_health::name,
    CALSERVE_DEVICE_HEALTH(CALSERVE_HEALTH_LIST)
#undef CALSERVE_HEALTH_LIST
};

constexpr std::string_view to_string(device_health s) {
    switch (s) {
#define CALSERVE_HEALTH_NAME(name, code) \
    case device_health::name: return #name;
        CALSERVE_DEVICE_HEALTH(CALSERVE_HEALTH_NAME)
#undef CALSERVE_HEALTH_NAME
    }
    return "?";
}

// The number calserve_device_state reports for `s`.
constexpr int health_code(device_health s) {
    switch (s) {
#define CALSERVE_HEALTH_CODE(name, code) \
    case device_health::name: return code;
        CALSERVE_DEVICE_HEALTH(CALSERVE_HEALTH_CODE)
#undef CALSERVE_HEALTH_CODE
    }
    return -1;
}

// A state from its name, ignoring ASCII case.
constexpr std::optional<device_health> parse_device_health(std::string_view name) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    for (device_health s : all_device_health) {
        const std::string_view n = to_string(s);
        if (n.size() != name.size()) continue;
        std::size_t i = 0;
        while (i < n.size() && n[i] == lower(name[i])) ++i;
        if (i == n.size()) return s;
    }
    return std::nullopt;
}

constexpr bool health_codes_distinct() {
    for (device_health a : all_device_health) {
        if (health_code(a) < 0 || health_code(a) >= static_cast<int>(std::size(all_device_health))) return false;
        for (device_health b : all_device_health)
            if (a != b && health_code(a) == health_code(b)) return false;
    }
    return true;
}
static_assert(health_codes_distinct(), "calserve_device_state codes must be 0..N-1, each used once");

}  // namespace calserve::device
