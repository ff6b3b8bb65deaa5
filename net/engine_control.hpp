#pragma once
//! engine_control: the runtime side of the control socket. Implements
//! `control_target` over a `serving_engine`: fault arm/clear/list go to the
//! engine's fault registry (the same one the simulator consults), device.reset
//! asks the DeviceActor for a reset, drain/resume toggle admission, stats
//! reports the engine's states and counters as one JSON object.
//!
//! Fault model: every call returns promptly and never blocks on device work; a
//! bad point name or spec is an `invalid_argument` result, never a crash.
//! Invariants: reads only thread-safe engine state (atomics, the registry's own
//! mutex, metric values), so it may be called from any io thread. With a
//! `traced_engine` (a recordable daemon), every command that changes the
//! engine goes through it so a trace records it; without one, trace.start
//! answers `unsupported` with how to enable it.
#include <functional>
#include <optional>

#include "engine/model_router.hpp"
#include "engine/serving_engine.hpp"
#include "engine/traced_engine.hpp"
#include "net/control_target.hpp"

namespace calserve::net {

// The daemon's `server_options::client_stall`: asks `faults` for client_stall
// before each stream write (fire -> its delay_ms) and counts each fire in
// faults_total{client_stall} there, since no device event follows a network write
// (the DeviceActor counts every other point). Declares the point consumed, so
// arming it on this daemon is accepted. `sequence_of` names the request's sequence
// (so `match.sequence` / `match.request` filters fire on that request's writes); it
// may be empty. `metrics` may be null.
std::function<std::optional<double>(const std::string& request_id)> client_stall_hook(
    std::shared_ptr<device::fault_registry> faults, metrics::calserve_metrics* metrics,
    std::function<std::optional<std::uint64_t>(const std::string&)> sequence_of = {});

class engine_control final : public control_target {
public:
    // `metrics` may be null (stats then omit the metric-derived fields).
    // `traced` may be null (threaded daemon: no recording).
    engine_control(engine::serving_engine& engine, metrics::calserve_metrics* metrics)
        : engine_(&engine), metrics_(metrics) {}
    // A recordable daemon: every command goes through `traced` (recorded), device
    // commands and stats to its serving generation.
    engine_control(engine::traced_engine& traced, metrics::calserve_metrics* metrics)
        : metrics_(metrics), traced_(&traced) {}
    // Several models and generations: device commands and stats go to the primary
    // model's serving generation; faults to the board's shared registry.
    engine_control(engine::model_router& router, metrics::calserve_metrics* metrics)
        : router_(&router), metrics_(metrics) {}

    result<std::uint64_t> fault_arm(const fault_arm_request& request) override;
    result<std::size_t> fault_clear(const fault_clear_request& request) override;
    std::vector<fault_entry> fault_list() override;
    void_result device_reset() override;
    void_result cache_clear() override;
    void_result drain() override;
    void_result resume() override;
    result<std::string> stats() override;
    void_result trace_start(const std::string& path) override;
    result<std::string> trace_stop() override;
    result<std::uint64_t> model_load(const std::string& alias, const std::string& dir, bool replace, bool keep) override;
    result<std::uint64_t> model_rollback(const std::string& alias) override;
    void_result model_unload(const std::string& alias) override;
    result<std::string> model_list() override;

private:
    // The engine device commands go to (held for the call); null when none serves.
    std::shared_ptr<engine::serving_engine> engine() const;
    std::shared_ptr<device::fault_registry> faults() const;

    engine::serving_engine* engine_ = nullptr;
    engine::model_router* router_ = nullptr;
    metrics::calserve_metrics* metrics_;
    engine::traced_engine* traced_ = nullptr;
};

}  // namespace calserve::net
