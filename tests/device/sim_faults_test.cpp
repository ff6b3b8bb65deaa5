// The effect of every device-level fault point at the device interface, and the
// reset -> warm-up recovery path.
#include <catch2/catch.hpp>

#include "sim_fixture.hpp"

using namespace calserve;
using namespace calserve::device;
using namespace std::chrono_literals;
using test::k_decode;
using test::k_prefill;

namespace {
fault_spec once(fault_point p, double delay_ms = 0) {
    fault_spec s;
    s.point = p;
    s.delay_ms = delay_ms;
    return s;
}

struct faulty : test::sim_fixture {
    faulty() { REQUIRE(dev->kv_allocate(1, 64).ok()); }
    result<job_result> run_one(slot s = slot::ping) {
        auto j = submit(k_prefill, s, 1, {1, 2});
        if (!j) return j.error();
        return dev->wait(*j, 1s);
    }
    void recover() {
        REQUIRE(dev->reset().ok());
        CHECK(dev->status().state == device_state::configured);
        REQUIRE(dev->warmup().ok());
        REQUIRE(dev->kv_allocate(1, 64).ok());  // reset cleared every sequence
        auto r = run_one();
        REQUIRE(r.ok());
        CHECK(logits(k_prefill, slot::ping) == test::expected_logits({1, 2}));
    }
};
}  // namespace

TEST_CASE("submit_busy: infer refused with a retryable status, nothing queued") {
    faulty f;
    REQUIRE(f.dev->faults().arm(once(fault_point::submit_busy)).ok());
    auto r = f.submit(k_prefill, slot::ping, 1, {1, 2});
    CHECK(r.code() == status::submit_busy);
    CHECK(fault_class_of(r.code()) == fault_class::retryable);
    CHECK(f.dev->kv_length(1) == 0);
    CHECK(f.dev->faults().fires(fault_point::submit_busy) == 1);
    CHECK(f.run_one().ok());  // the retry succeeds
}

TEST_CASE("submit_error: infer refused with a device-class status") {
    faulty f;
    REQUIRE(f.dev->faults().arm(once(fault_point::submit_error)).ok());
    auto r = f.submit(k_prefill, slot::ping, 1, {1, 2});
    CHECK(r.code() == status::submit_error);
    CHECK(fault_class_of(r.code()) == fault_class::device);
}

TEST_CASE("wait_timeout: the job hangs, Wait returns within its bound, reset recovers") {
    faulty f;
    REQUIRE(f.dev->faults().arm(once(fault_point::wait_timeout)).ok());
    auto j = f.submit(k_prefill, slot::ping, 1, {1, 2});
    REQUIRE(j.ok());
    const auto t0 = f.clock.now();
    auto r = f.dev->wait(*j, 50ms);
    CHECK(r.code() == status::wait_timeout);
    CHECK(f.clock.now() - t0 == 50ms);  // virtual time: exactly the bound
    // The async form reports the timeout too, exactly once.
    int calls = 0;
    f.dev->wait_async(*j, 20ms, [&](result<job_result> x) {
        ++calls;
        CHECK(x.code() == status::wait_timeout);
    });
    f.clock.run_until_idle();
    CHECK(calls == 1);
    // A job behind the hung one never completes either (in-order completion).
    REQUIRE(f.dev->kv_allocate(2, 16).ok());
    auto k = f.submit(k_prefill, slot::pong, 2, {3});
    REQUIRE(k.ok());
    CHECK(f.dev->wait(*k, 50ms).code() == status::wait_timeout);
    f.recover();
    CHECK(f.dev->wait(*k, 1ms).code() == status::not_ready);  // discarded by the reset
}

TEST_CASE("ccu_exception: job fails, device faulted until reset and warm-up") {
    faulty f;
    REQUIRE(f.dev->faults().arm(once(fault_point::ccu_exception)).ok());
    auto r = f.run_one();
    CHECK(r.code() == status::ccu_exception);
    CHECK(f.dev->status().state == device_state::faulted);
    CHECK(f.submit(k_prefill, slot::pong, 1, {1}).code() == status::not_ready);
    f.recover();
}

TEST_CASE("h2d_error: the input write fails and faults the device") {
    faulty f;
    REQUIRE(f.dev->faults().arm(once(fault_point::h2d_error)).ok());
    auto r = f.submit(k_prefill, slot::ping, 1, {1, 2});
    CHECK(r.code() == status::h2d_error);
    CHECK(f.dev->status().state == device_state::faulted);
    f.recover();
}

TEST_CASE("d2h_error: the job completes with d2h_error, no output readable") {
    faulty f;
    REQUIRE(f.dev->faults().arm(once(fault_point::d2h_error)).ok());
    CHECK(f.run_one().code() == status::d2h_error);
    CHECK(f.dev->output(k_prefill, slot::ping, "logits").code() == status::not_found);
    f.recover();
}

TEST_CASE("kv_alloc_fail: allocate and apply report kv_full") {
    faulty f;
    fault_spec s = once(fault_point::kv_alloc_fail);
    s.mode = arm_mode::count;
    s.count = 2;
    REQUIRE(f.dev->faults().arm(s).ok());
    CHECK(f.dev->kv_allocate(2, 16).code() == status::kv_full);
    CHECK(f.dev->kv_apply(1, 100, 1s).code() == status::kv_full);
    CHECK(f.dev->kv_allocate(2, 16).ok());
}

TEST_CASE("kv_apply_stall: apply stalls, bounded by its timeout") {
    faulty f;
    SECTION("a stall shorter than the bound delays, then succeeds") {
        REQUIRE(f.dev->faults().arm(once(fault_point::kv_apply_stall, 30)).ok());
        const auto t0 = f.clock.now();
        CHECK(f.dev->kv_apply(1, 100, 1s).ok());
        CHECK(f.clock.now() - t0 == 30ms);
    }
    SECTION("an endless stall is cut at the bound with kv_full") {
        REQUIRE(f.dev->faults().arm(once(fault_point::kv_apply_stall)).ok());
        const auto t0 = f.clock.now();
        CHECK(f.dev->kv_apply(1, 100, 200ms).code() == status::kv_full);
        CHECK(f.clock.now() - t0 == 200ms);
    }
}

TEST_CASE("logits_nan: the job succeeds but its logits are not finite") {
    faulty f;
    REQUIRE(f.dev->faults().arm(once(fault_point::logits_nan)).ok());
    REQUIRE(f.run_one().ok());
    auto out = f.dev->output(k_prefill, slot::ping, "logits");
    REQUIRE(out.ok());
    auto check = check_logits_bf16(*out);
    CHECK(check.code() == status::logits_nan);
    CHECK(fault_class_of(check.code()) == fault_class::device);
}

TEST_CASE("slow_infer: compute takes delay_ms longer") {
    faulty f;  // step 10 ms
    REQUIRE(f.dev->faults().arm(once(fault_point::slow_infer, 40)).ok());
    auto r = f.run_one();
    REQUIRE(r.ok());
    CHECK(r->timing.compute_end_ns - r->timing.compute_start_ns == 50'000'000);
    auto r2 = f.run_one(slot::pong);
    REQUIRE(r2.ok());
    CHECK(r2->timing.compute_end_ns - r2->timing.compute_start_ns == 10'000'000);
}

TEST_CASE("device_lost: every call fails with device_lost until reset") {
    faulty f;
    REQUIRE(f.dev->faults().arm(once(fault_point::device_lost)).ok());
    CHECK(f.run_one().code() == status::device_lost);
    CHECK(f.dev->status().state == device_state::lost);
    CHECK(f.dev->kv_allocate(3, 1).code() == status::device_lost);
    CHECK(f.dev->slice(k_decode, slot::ping, 1).code() == status::device_lost);
    f.recover();
}

TEST_CASE("reset_fail: reset fails with reset_failed and the device stays faulted") {
    faulty f;
    REQUIRE(f.dev->faults().arm(once(fault_point::ccu_exception)).ok());
    REQUIRE(f.run_one().code() == status::ccu_exception);
    REQUIRE(f.dev->faults().arm(once(fault_point::reset_fail)).ok());
    CHECK(f.dev->reset().code() == status::reset_failed);
    CHECK(f.dev->status().state == device_state::faulted);
    f.recover();
    CHECK(f.dev->status().resets == 1);
}

TEST_CASE("configure_fail: configure fails with configure_failed, a retry succeeds") {
    sim::manual_scheduler clock;
    sim::sim_options o;
    o.scheduler = &clock;
    o.make_model = [](const package_spec& s) -> result<std::unique_ptr<model::causal_lm>> {
        return std::unique_ptr<model::causal_lm>(std::make_unique<test::history_lm>(s.vocab_size));
    };
    auto dev = sim::sim_device::create(o);
    REQUIRE(dev->load(test::tiny_spec()).ok());
    REQUIRE(dev->faults().arm(once(fault_point::configure_fail)).ok());
    auto r = dev->configure();
    CHECK(r.code() == status::configure_failed);
    CHECK(fault_class_of(r.code()) == fault_class::model);
    CHECK(dev->configure().ok());
}

TEST_CASE("a fault matched to another submodel or sequence does not fire") {
    faulty f;
    fault_spec s = once(fault_point::ccu_exception);
    s.match.submodel = k_decode;
    REQUIRE(f.dev->faults().arm(s).ok());
    fault_spec t = once(fault_point::submit_busy);
    t.match.sequence = 42;
    REQUIRE(f.dev->faults().arm(t).ok());
    CHECK(f.run_one().ok());
    CHECK(f.dev->faults().fires(fault_point::ccu_exception) == 0);
    CHECK(f.dev->faults().fires(fault_point::submit_busy) == 0);
    auto j = f.submit(k_decode, slot::pong, 1, {7});
    REQUIRE(j.ok());
    CHECK(f.dev->wait(*j, 1s).code() == status::ccu_exception);
}

TEST_CASE("reset discards jobs in flight: their waiters hear about it") {
    faulty f;
    auto j = f.submit(k_prefill, slot::ping, 1, {1, 2});
    REQUIRE(j.ok());
    std::optional<status> got;
    f.dev->wait_async(*j, 1s, [&](result<job_result> r) { got = r.code(); });
    REQUIRE(f.dev->reset().ok());
    CHECK(got == status::not_ready);
    CHECK(f.dev->kv().sequences == 0);
    f.clock.run_until_idle();  // the stale completion timer is harmless
    CHECK(f.dev->status().jobs_in_flight == 0);
}
