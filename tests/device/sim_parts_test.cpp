// Simulator parts on their own: schedulers, KV pool, latency model.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <mutex>

#include "device/sim/kv_pool.hpp"
#include "device/sim/latency_model.hpp"
#include "device/sim/scheduler.hpp"
#include "sim_fixture.hpp"

using namespace calserve;
using namespace calserve::device;
using namespace std::chrono_literals;

TEST_CASE("manual scheduler: events in (time, insertion) order, time moves only when driven") {
    sim::manual_scheduler s;
    std::vector<int> order;
    s.call_at(20ms, [&] { order.push_back(3); });
    s.call_at(10ms, [&] { order.push_back(1); });
    s.call_at(10ms, [&] { order.push_back(2); s.call_at(15ms, [&] { order.push_back(25); }); });
    CHECK(s.now() == 0ms);
    s.advance_to(12ms);
    CHECK(order == std::vector<int>{1, 2});
    CHECK(s.now() == 12ms);
    CHECK(s.run_until_idle() == 2);
    CHECK(order == std::vector<int>{1, 2, 25, 3});
    CHECK(s.now() == 20ms);
    bool flag = false;
    s.call_at(30ms, [&] { flag = true; });
    CHECK(s.drive_until([&] { return flag; }, 100ms));
    CHECK(s.now() == 30ms);
    CHECK(s.drive_until([] { return false; }, 40ms));
    CHECK(s.now() == 40ms);
}

TEST_CASE("real-time scheduler: fires in order from its own thread, earlier events first") {
    sim::realtime_scheduler s;
    std::mutex m;
    std::condition_variable cv;
    std::vector<int> order;
    const auto t0 = s.now();
    auto push = [&](int v) {
        std::lock_guard l(m);
        order.push_back(v);
        cv.notify_all();
    };
    s.call_at(t0 + 30ms, [&] { push(2); });
    s.call_at(t0 + 5ms, [&] { push(1); });  // earlier than the one the thread sleeps on
    std::unique_lock l(m);
    REQUIRE(cv.wait_for(l, 5s, [&] { return order.size() == 2; }));
    CHECK(order == std::vector<int>{1, 2});
    CHECK(s.now() - t0 >= 30ms);
}

TEST_CASE("kv pool blocks are conserved") {
    kv_layout layout{1, 1, 1, 100, 3, 2, 2, 10};  // 300 tokens, 30 blocks
    sim::kv_pool pool(layout);
    CHECK(pool.usage().blocks_total == 30);
    REQUIRE(pool.allocate(1, 15).ok());  // 2 blocks
    REQUIRE(pool.apply(1, 100).ok());    // 10 blocks
    CHECK(pool.capacity_of(1) == 100);
    CHECK(pool.apply(1, 101).code() == status::context_overflow);
    REQUIRE(pool.apply(1, 50).ok());     // never shrinks
    CHECK(pool.usage().blocks_used == 10);
    REQUIRE(pool.allocate(2, 100).ok());
    REQUIRE(pool.allocate(3, 95).ok());
    CHECK(pool.usage().blocks_used == 30);
    CHECK_FALSE(pool.can_allocate(1));
    CHECK(pool.can_allocate(0));
    CHECK(pool.allocate(4, 1).code() == status::kv_full);
    REQUIRE(pool.free(2).ok());
    CHECK(pool.usage().blocks_used == 20);
    pool.clear();
    CHECK(pool.usage().blocks_used == 0);
    CHECK(pool.usage().sequences == 0);
}

TEST_CASE("latency model: every term, the overrides, MoE active fraction") {
    auto spec = test::tiny_spec(2);
    spec.chips = {chip_memory{2'000'000'000, 0}, chip_memory{1'000'000'000, 0}};
    spec.hidden_size = 1000;
    sim::latency_constants c;
    c.dram_gbps = 100;
    c.pcie_gbps = 10;
    c.d2d_gbps = 50;
    c.peak_tflops = 10;
    c.sync_us = 5;
    c.launch_us = 20;
    sim::latency_model m(spec, c);
    auto d = m.step(submodel_kind::decode, 1, 99);
    CHECK(d.weights_ms == Approx(20.0));                          // 2 GB (slowest chip) / 100 GB/s
    CHECK(d.kv_bytes == Approx(spec.kv.bytes_per_token() * 101.0 / 2));
    CHECK(d.syncs == 2.0 * spec.kv.layers);
    CHECK(d.sync_ms == Approx(d.syncs * 0.005));
    CHECK(d.flops > 0);                                           // one token's compute ...
    CHECK(d.flops_ms < 0.01 * d.weights_ms);                      // ... small: decode is bandwidth bound
    CHECK(d.d2d_bytes == Approx(d.syncs * 1000 * 2));
    CHECK(d.launch_ms == Approx(0.02));
    CHECK(d.total_ms == Approx(d.weights_ms + d.kv_ms + d.sync_ms + d.flops_ms + d.d2d_ms + d.launch_ms));
    auto p = m.step(submodel_kind::prefill, 100, 0);
    CHECK(p.flops > 0);
    CHECK(p.total_ms > d.total_ms);
    CHECK(m.h2d_ms(10'000'000) == Approx(1.0));
    CHECK(m.configure_ms() == Approx(300.0));
    c.step_ms = 7;
    c.d2h_ms = 3;
    sim::latency_model fixed(spec, c);
    CHECK(fixed.step(submodel_kind::prefill, 100, 0).total_ms == 7.0);
    CHECK(fixed.d2h_ms(123456) == 3.0);
    // Dense: every step reads every weight. MoE: one token reads a fraction, a long prefill nearly all.
    CHECK(m.active_weight_fraction(1) == 1.0);
    spec.num_experts = 128;
    spec.experts_per_token = 8;
    spec.intermediate_size = 768;
    sim::latency_model moe(spec, c);
    CHECK(moe.active_weight_fraction(1) < 0.3);
    CHECK(moe.active_weight_fraction(4096) > 0.99);
}
