#pragma once
//! Building the device a serving engine drives: the simulated NPU for a calbin
//! package, or the same simulator at zero pacing for a plain Hugging Face
//! directory (the `cpu` backend: a synthetic one-chip package_spec whose
//! reference model is the directory itself).
#include <filesystem>
#include <memory>

#include "actors/runtime.hpp"
#include "config/config.hpp"
#include "device/types.hpp"
#include "device/sim/scheduler.hpp"

namespace calserve::actors {

// The simulator's clock on the actor runtime's clock: virtual in deterministic
// mode (events fire as runtime timers), real timers in threaded mode.
class runtime_scheduler final : public device::sim::sim_scheduler {
public:
    explicit runtime_scheduler(runtime& rt) : rt_(rt), strand_(rt.make_strand()) {}
    device::sim::sim_time now() const override { return rt_.now(); }
    void call_at(device::sim::sim_time when, device::sim::sim_callback fn) override {
        rt_.schedule_after(strand_, when - rt_.now(), std::move(fn));
    }
    bool is_virtual() const override { return rt_.mode() == run_mode::deterministic; }

private:
    runtime& rt_;
    runtime::strand_type strand_;
};

// A one-chip package_spec for serving a Hugging Face directory on the cpu backend.
result<device::package_spec> cpu_package_spec(const std::filesystem::path& model_dir, std::int64_t context,
                                              std::int64_t kv_sequences);

}  // namespace calserve::actors
