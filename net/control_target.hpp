#pragma once
//! What the control socket drives. net/ parses and validates newline-delimited
//! JSON commands (control_socket.hpp) and calls this interface; the runtime
//! implements it (fault registry, DeviceActor reset, drain, stats, tracing).
//!
//! Contract: every call returns promptly (no waiting for device work to finish:
//! `device_reset` and `drain` *start* the action); failures are `result` errors
//! whose status maps to the structured error the client sees; calls may come
//! from any io thread, one at a time per control connection.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/result.hpp"

namespace calserve::net {

// fault.arm arguments, already type- and range-checked by the control socket.
struct fault_arm_request {
    std::string point;                    // a fault point name (docs/faults.md); the target checks it exists
    std::string mode = "once";            // once | count | probability | always
    std::int64_t count = 1;               // mode count: >= 1
    double probability = 1.0;             // mode probability: (0, 1]
    std::uint64_t seed = 0;               // 0 = derived from the daemon's seed
    double delay_ms = 0;                  // >= 0; meaning depends on the point
    std::optional<std::uint32_t> chip;    // match: empty = any
    std::optional<std::string> submodel;
    std::optional<std::uint64_t> request;
    std::optional<std::uint64_t> sequence;
};

// fault.clear: everything, one point, or one arm id.
struct fault_clear_request {
    std::optional<std::string> point;
    std::optional<std::uint64_t> id;
};

struct fault_entry {
    std::uint64_t id = 0;
    fault_arm_request spec;
    std::int64_t remaining = 0;           // -1 = unbounded
    std::uint64_t fires = 0;
};

class control_target {
public:
    virtual ~control_target() = default;
    virtual result<std::uint64_t> fault_arm(const fault_arm_request& request) = 0;   // -> arm id
    virtual result<std::size_t> fault_clear(const fault_clear_request& request) = 0; // -> entries removed
    virtual std::vector<fault_entry> fault_list() = 0;
    virtual void_result device_reset() = 0;
    // Empties the prefix cache (cached sequences' KV freed on the device).
    virtual void_result cache_clear() { return make_error(status::unsupported, "this daemon has no prefix cache"); }
    virtual void_result drain() = 0;
    virtual void_result resume() = 0;
    // A JSON object (text) of the daemon's counters and states.
    virtual result<std::string> stats() = 0;
    virtual void_result trace_start(const std::string& path) = 0;
    virtual result<std::string> trace_stop() = 0;  // -> what was written (path, message count)

    // Generations (docs/generations.md). load/rollback start the work and answer at
    // once with the generation number; list (a JSON array, as text) shows progress.
    virtual result<std::uint64_t> model_load(const std::string& alias, const std::string& dir, bool replace, bool keep) {
        (void)alias, (void)dir, (void)replace, (void)keep;
        return make_error(status::unsupported, "this daemon does not manage generations");
    }
    virtual result<std::uint64_t> model_rollback(const std::string& alias) {
        (void)alias;
        return make_error(status::unsupported, "this daemon does not manage generations");
    }
    virtual void_result model_unload(const std::string& alias) {
        (void)alias;
        return make_error(status::unsupported, "this daemon does not manage generations");
    }
    virtual result<std::string> model_list() {
        return make_error(status::unsupported, "this daemon does not manage generations");
    }
};

}  // namespace calserve::net
