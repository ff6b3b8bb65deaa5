#pragma once
//! The simulator's clock on the actor runtime's clock: virtual in deterministic
//! mode (device events fire as runtime timers, in order, on one thread), real
//! timers in threaded mode. One clock for actors and device keeps a seeded or
//! replayed run exact.
#include "actors/runtime/runtime.hpp"
#include "device/sim/scheduler.hpp"

namespace calserve::engine {

class runtime_scheduler final : public device::sim::sim_scheduler {
public:
    explicit runtime_scheduler(actors::runtime& rt) : rt_(rt), strand_(rt.make_strand()) {}
    device::sim::sim_time now() const override { return rt_.now(); }
    void call_at(device::sim::sim_time when, device::sim::sim_callback fn) override {
        rt_.schedule_after(strand_, when - rt_.now(), std::move(fn));
    }
    bool is_virtual() const override { return rt_.mode() == actors::run_mode::deterministic; }

private:
    actors::runtime& rt_;
    actors::runtime::strand_type strand_;
};

}  // namespace calserve::engine
