#pragma once
//! Fault-point registry: the one place where injected faults are armed, matched
//! and counted. The simulator (device level), the runtime (sampler_stall) and the
//! network layer (client_stall) ask `check(point, site)` at the spot where the
//! fault would happen; the control socket arms, lists and clears through it.
//!
//! Fault model: an armed entry fires once, N times, with probability p (its own
//! seeded generator, so a seed reproduces the same fire pattern), or always,
//! optionally only where the site matches (chip, submodel, sequence, request).
//! `delay_ms` is carried to the site, which decides what a delay means there.
//!
//! Consumers: a point only fires where some layer asks for it. A process that
//! knows which layers it runs declares them (`set_consumers`, `add_consumer`);
//! from then on arming a point nobody asks is refused with `unsupported` instead
//! of succeeding silently. A registry with no declaration accepts every point
//! (unit tests, the device runner).
//!
//! Invariants: thread-safe (one mutex; an atomic count keeps the unarmed hot path
//! lock-free); fire counts only grow, also across `clear`; an exhausted entry
//! stays listed (with its fires) until cleared.
#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/result.hpp"

namespace calserve::device {

// name, where it acts, what it does (docs/faults.md expands each).
#define CALSERVE_FAULT_POINTS(X)                                                       \
    X(submit_busy, "infer() is refused with submit_busy (retryable)")                  \
    X(submit_error, "infer() is refused with submit_error (device)")                   \
    X(wait_timeout, "the job hangs: it never completes until reset")                   \
    X(ccu_exception, "the job completes with ccu_exception; device faulted")           \
    X(h2d_error, "write_input() fails with h2d_error; device faulted")                 \
    X(d2h_error, "the job completes with d2h_error; device faulted")                   \
    X(kv_alloc_fail, "kv_allocate()/kv_apply() fail with kv_full")                     \
    X(kv_apply_stall, "kv_apply() stalls delay_ms (bounded by its timeout), kv_full")  \
    X(kv_copy_fail, "kv_copy() fails with kv_full; the destination stays empty")      \
    X(logits_nan, "the job's logits contain NaN (status ok: the host must check)")     \
    X(slow_infer, "the job's compute takes delay_ms longer")                           \
    X(device_lost, "the job completes with device_lost; every call fails until reset") \
    X(reset_fail, "reset() fails with reset_failed")                                   \
    X(configure_fail, "configure() fails with configure_failed")                       \
    X(sampler_stall, "runtime: the sampler stalls delay_ms")                           \
    X(client_stall, "network: the stream consumer stalls or vanishes")

enum class fault_point : std::uint8_t {
#define CALSERVE_FAULT_ENUM(name, text) name,
    CALSERVE_FAULT_POINTS(CALSERVE_FAULT_ENUM)
#undef CALSERVE_FAULT_ENUM
};

inline constexpr fault_point all_fault_points[] = {
#define CALSERVE_FAULT_LIST(name, text) fault_point::name,
    CALSERVE_FAULT_POINTS(CALSERVE_FAULT_LIST)
#undef CALSERVE_FAULT_LIST
};
inline constexpr std::size_t k_fault_point_count = std::size(all_fault_points);

std::string_view to_string(fault_point p);
std::string_view describe(fault_point p);
std::optional<fault_point> parse_fault_point(std::string_view name);

enum class arm_mode : std::uint8_t { once, count, probability, always };
std::string_view to_string(arm_mode m);
std::optional<arm_mode> parse_arm_mode(std::string_view name);

// Empty fields match anything.
struct fault_match {
    std::optional<std::uint32_t> chip;
    std::optional<std::string> submodel;
    std::optional<std::uint64_t> sequence;
    std::optional<std::uint64_t> request;
};

struct fault_spec {
    fault_point point = fault_point::submit_busy;
    arm_mode mode = arm_mode::once;
    std::int64_t count = 1;     // arm_mode::count
    double probability = 1.0;   // arm_mode::probability, in (0, 1]
    std::uint64_t seed = 0;     // probability generator; 0 = derived from the registry seed
    double delay_ms = 0;        // meaning depends on the point (docs/faults.md)
    fault_match match;
};

// A spec from its textual form (control socket, trace): an unknown point or
// mode is invalid_argument naming it; the numbers are checked by `arm`.
result<fault_spec> make_fault_spec(std::string_view point, std::string_view mode, std::int64_t count,
                                   double probability, std::uint64_t seed, double delay_ms, fault_match match);

// Where a check happens. chip_mask 0 = chip unknown (a chip match then fails).
// A batched job names its first live row in `sequence` and all its live rows in
// `sequences`: a sequence match fires when any of them matches.
struct fault_site {
    std::uint32_t chip_mask = 0;
    std::string_view submodel;
    std::optional<std::uint64_t> sequence;
    std::optional<std::uint64_t> request;
    std::span<const std::uint64_t> sequences = {};
};

struct fault_fire {
    fault_point point;
    std::uint64_t arm_id = 0;
    double delay_ms = 0;
};

struct armed_fault {
    std::uint64_t id = 0;
    fault_spec spec;
    std::int64_t remaining = 0;  // -1 = unbounded (probability, always)
    std::uint64_t fires = 0;
    std::uint64_t checks = 0;    // matching checks seen
    bool exhausted() const { return remaining == 0; }
};

class fault_registry {
public:
    explicit fault_registry(std::uint64_t seed = 1) : seed_(seed) {}

    // Validates and arms; returns the arm id. A point without a declared consumer
    // (once any is declared) is `unsupported`.
    result<std::uint64_t> arm(fault_spec spec);
    // Declares the points this process's layers ask for (replaces any earlier list) /
    // adds one (the network layer when its hook is wired).
    void set_consumers(std::initializer_list<fault_point> points);
    void add_consumer(fault_point point);
    bool consumed(fault_point point) const;
    // Disarms everything / one point / one arm id; returns how many entries were removed.
    std::size_t clear();
    std::size_t clear(fault_point point);
    std::size_t clear_id(std::uint64_t arm_id);

    // Asks whether `point` fires here; consumes one shot of the first matching live entry.
    std::optional<fault_fire> check(fault_point point, const fault_site& site);

    std::vector<armed_fault> list() const;
    // Called on every fire, from `check`'s thread with the registry locked (a
    // trace records fault firings with it): must be cheap and must not call back.
    using fire_observer = std::function<void(const fault_fire&)>;
    void set_fire_observer(fire_observer observer);
    // Total fires of a point since the registry was created (survives clear).
    std::uint64_t fires(fault_point point) const;
    bool any_armed() const { return live_.load(std::memory_order_acquire) > 0; }

private:
    struct entry {
        armed_fault state;
        std::mt19937_64 rng;
    };
    bool matches(const fault_match& m, const fault_site& site) const;
    bool try_fire(entry& e);
    void recount_live();

    mutable std::mutex mutex_;
    std::uint64_t seed_;
    std::uint64_t next_id_ = 1;
    std::map<std::uint64_t, entry> entries_;              // by arm id, i.e. arm order
    std::uint64_t total_fires_[k_fault_point_count] = {};  // survives clear
    std::atomic<std::size_t> live_{0};                    // entries not exhausted
    bool restricted_ = false;                             // guarded by mutex_: consumers were declared
    bool consumed_[k_fault_point_count] = {};             // guarded by mutex_
    fire_observer observer_;                              // guarded by mutex_
};

}  // namespace calserve::device
