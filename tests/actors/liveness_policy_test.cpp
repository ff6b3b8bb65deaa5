// The BatchTick's liveness check (actors/liveness_policy.hpp), table-driven: idle with a
// runnable row, a free slot and a ready device, something must be still to come.
#include <catch2/catch.hpp>

#include "actors/liveness_policy.hpp"

using namespace calserve::actors;

namespace {
// Three ready rows, both slots free, the device up, nothing out: the state of the stall
// seen once after a generation switch.
idle_input stuck() {
    idle_input in;
    in.device_up = true;
    in.slot_free = true;
    in.ready = 3;
    return in;
}
}  // namespace

TEST_CASE("liveness policy: runnable rows, a free slot, a ready device and nothing to come is a stall", "[policy][liveness]") {
    CHECK(idle_is_stalled(stuck()));
}

TEST_CASE("liveness policy: anything still to come that plans again is not a stall", "[policy][liveness]") {
    auto in = stuck();
    SECTION("a job in flight ends") { in.job_in_flight = true; }
    SECTION("the admission window's timer fires") { in.window_timer = true; }
    SECTION("a Request's answer comes") { in.awaiting = 1; }
    SECTION("a kv_grow answers") { in.kv_out = 1; }
    SECTION("the device that refused a job as not ready comes up") { in.awaiting_device_up = true; }
    SECTION("the device is down or dead") { in.device_up = false; }
    SECTION("no slot is free") { in.slot_free = false; }
    SECTION("no row could run") { in.ready = 0; }
    CHECK_FALSE(idle_is_stalled(in));
}
