// The host's step fit (device/sim/host_cost.hpp): a decode-program step costs a fixed
// time (the weights, read once) plus a rate per unit of work; the fit tells it apart
// once the steps seen differ in work, and says nothing before.
#include <catch2/catch.hpp>

#include "device/sim/host_cost.hpp"

using calserve::device::sim::host_cost_model;

TEST_CASE("host_cost_model: the step fit finds the fixed time and the rate of work") {
    host_cost_model m;
    CHECK(m.step_estimate_ns(5) == 0);                          // nothing seen
    for (int i = 0; i < 8; ++i) m.observe_step(1.0, 100.0);   // one-row plain steps only
    CHECK(m.step_estimate_ns(5) == 0);                          // all alike: no slope to tell
    // Steps of 1 to 20 positions at 80 ns fixed + 20 ns a position (1 row: 100; 5: 180; 20: 480).
    for (int i = 0; i < 40; ++i)
        for (double w : {1.0, 5.0, 4.0, 20.0}) m.observe_step(w, 80.0 + 20.0 * w);
    CHECK(m.step_estimate_ns(1) == Approx(100).epsilon(0.05));
    CHECK(m.step_estimate_ns(20) == Approx(480).epsilon(0.02));
    // The cpu backend's position cost at 1 row (5 positions vs 1) is below that at 4 rows (20 vs 4).
    const double one = (m.step_estimate_ns(5) - m.step_estimate_ns(1)) / (4 * m.step_estimate_ns(1));
    const double four = (m.step_estimate_ns(20) - m.step_estimate_ns(4)) / (4 * m.step_estimate_ns(4));
    CHECK(one == Approx(0.2).epsilon(0.1));
    CHECK(four == Approx(0.5).epsilon(0.1));
}

TEST_CASE("host_cost_model: noise with no slope, or ignored samples, leave the fit unknown") {
    host_cost_model m;
    m.observe_step(0, 100);
    m.observe_step(5, 0);
    CHECK(m.step_estimate_ns(1) == 0);
    for (int i = 0; i < 10; ++i) {
        m.observe_step(1, 200);
        m.observe_step(10, 100);  // more work, less time: no positive rate
    }
    CHECK(m.step_estimate_ns(1) == 0);
}
