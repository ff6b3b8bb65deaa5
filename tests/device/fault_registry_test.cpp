// Fault registry: modes, matching, counting, list/clear, seeded reproducibility,
// and the status table's fault classes for device codes.
#include <catch2/catch.hpp>

#include <thread>

#include "device/fault_points.hpp"

using namespace calserve;
using namespace calserve::device;

namespace {
fault_spec spec(fault_point p, arm_mode m) {
    fault_spec s;
    s.point = p;
    s.mode = m;
    return s;
}
int fires_in(fault_registry& r, fault_point p, int checks, const fault_site& site = {}) {
    int n = 0;
    for (int i = 0; i < checks; ++i) n += r.check(p, site).has_value() ? 1 : 0;
    return n;
}
}  // namespace

TEST_CASE("every status maps to its fault class") {
    struct row {
        status s;
        fault_class c;
    };
    const row rows[] = {
        {status::submit_busy, fault_class::retryable},      {status::bad_csr, fault_class::request},
        {status::slice_out_of_range, fault_class::request}, {status::missing_tensor, fault_class::request},
        {status::unknown_sequence, fault_class::request},   {status::sequence_exists, fault_class::request},
        {status::kv_full, fault_class::capacity},           {status::out_of_device_memory, fault_class::capacity},
        {status::configure_failed, fault_class::model},     {status::submodel_not_found, fault_class::model},
        {status::package_invalid, fault_class::model},      {status::not_configured, fault_class::model},
        {status::wait_timeout, fault_class::device},        {status::ccu_exception, fault_class::device},
        {status::device_lost, fault_class::device},         {status::h2d_error, fault_class::device},
        {status::d2h_error, fault_class::device},           {status::logits_nan, fault_class::device},
        {status::reset_failed, fault_class::device},        {status::submit_error, fault_class::device},
        {status::not_ready, fault_class::device},
    };
    for (const auto& r : rows) {
        INFO(to_string(r.s));
        CHECK(fault_class_of(r.s) == r.c);
    }
    for (status s : all_statuses) CHECK_FALSE(to_string(s).empty());
}

TEST_CASE("fault point names round-trip and cover the design's list") {
    CHECK(k_fault_point_count == 16);  // the design's 15 and kv_copy_fail (seq copy, docs/device.md)
    for (fault_point p : all_fault_points) {
        CHECK(parse_fault_point(to_string(p)) == p);
        CHECK_FALSE(describe(p).empty());
    }
    CHECK_FALSE(parse_fault_point("submit").has_value());
    CHECK(parse_arm_mode("probability") == arm_mode::probability);
}

TEST_CASE("once, count and always modes") {
    fault_registry r;
    CHECK_FALSE(r.any_armed());
    REQUIRE(r.arm(spec(fault_point::submit_busy, arm_mode::once)).ok());
    CHECK(r.any_armed());
    CHECK(fires_in(r, fault_point::submit_busy, 5) == 1);
    CHECK_FALSE(r.any_armed());
    auto c = spec(fault_point::ccu_exception, arm_mode::count);
    c.count = 3;
    REQUIRE(r.arm(c).ok());
    CHECK(fires_in(r, fault_point::ccu_exception, 10) == 3);
    REQUIRE(r.arm(spec(fault_point::slow_infer, arm_mode::always)).ok());
    CHECK(fires_in(r, fault_point::slow_infer, 10) == 10);
    CHECK(fires_in(r, fault_point::device_lost, 10) == 0);
    CHECK(r.fires(fault_point::ccu_exception) == 3);
}

TEST_CASE("probability mode is seeded and reproducible") {
    auto p = spec(fault_point::logits_nan, arm_mode::probability);
    p.probability = 0.25;
    p.seed = 77;
    fault_registry a, b;
    REQUIRE(a.arm(p).ok());
    REQUIRE(b.arm(p).ok());
    std::vector<bool> pa, pb;
    for (int i = 0; i < 400; ++i) {
        pa.push_back(a.check(fault_point::logits_nan, {}).has_value());
        pb.push_back(b.check(fault_point::logits_nan, {}).has_value());
    }
    CHECK(pa == pb);
    const auto n = std::count(pa.begin(), pa.end(), true);
    CHECK(n > 50);   // 100 expected; far outside these bounds would mean the probability is ignored
    CHECK(n < 150);
}

TEST_CASE("match on chip, submodel, sequence and request") {
    fault_registry r;
    auto s = spec(fault_point::ccu_exception, arm_mode::always);
    s.match.chip = 1;
    s.match.submodel = "decode_x";
    s.match.sequence = 7;
    REQUIRE(r.arm(s).ok());
    CHECK_FALSE(r.check(fault_point::ccu_exception, {0b01, "decode_x", 7, {}}));
    CHECK_FALSE(r.check(fault_point::ccu_exception, {0b11, "decode", 7, {}}));
    CHECK_FALSE(r.check(fault_point::ccu_exception, {0b11, "decode_x", 8, {}}));
    CHECK_FALSE(r.check(fault_point::ccu_exception, {0, "decode_x", 7, {}}));  // chip unknown
    CHECK(r.check(fault_point::ccu_exception, {0b11, "decode_x", 7, {}}));
    auto q = spec(fault_point::client_stall, arm_mode::once);
    q.match.request = 12;
    q.delay_ms = 250;
    REQUIRE(r.arm(q).ok());
    CHECK_FALSE(r.check(fault_point::client_stall, {0, "", {}, 11}));
    auto fire = r.check(fault_point::client_stall, {0, "", {}, 12});
    REQUIRE(fire);
    CHECK(fire->delay_ms == 250);
    // A site without a request number matches a request filter against its sequences
    // (the daemon numbers requests by sequence); one with a number does not fall back.
    auto w = spec(fault_point::logits_nan, arm_mode::always);
    w.match.request = 5;
    REQUIRE(r.arm(w).ok());
    CHECK_FALSE(r.check(fault_point::logits_nan, {0b1, "d", 4, {}}));
    CHECK(r.check(fault_point::logits_nan, {0b1, "d", 5, {}}));
    const std::uint64_t rows[] = {3, 5, 9};
    CHECK(r.check(fault_point::logits_nan, {0b1, "d", 3, {}, rows}));
    CHECK_FALSE(r.check(fault_point::logits_nan, {0b1, "d", 5, 6}));
}

TEST_CASE("list shows fires and remaining, clear by point, id or all, fires survive clear") {
    fault_registry r;
    auto c = spec(fault_point::submit_busy, arm_mode::count);
    c.count = 2;
    auto id = r.arm(c);
    REQUIRE(id.ok());
    REQUIRE(r.arm(spec(fault_point::reset_fail, arm_mode::always)).ok());
    r.check(fault_point::submit_busy, {});
    auto l = r.list();
    REQUIRE(l.size() == 2);
    CHECK(l[0].id == *id);
    CHECK(l[0].fires == 1);
    CHECK(l[0].remaining == 1);
    CHECK(l[1].remaining == -1);
    CHECK(r.clear(fault_point::reset_fail) == 1);
    CHECK(r.clear_id(*id) == 1);
    CHECK(r.list().empty());
    CHECK(r.fires(fault_point::submit_busy) == 1);
    REQUIRE(r.arm(spec(fault_point::h2d_error, arm_mode::once)).ok());
    CHECK(r.clear() == 1);
    CHECK_FALSE(r.any_armed());
}

TEST_CASE("invalid arm requests are rejected") {
    fault_registry r;
    auto c = spec(fault_point::submit_busy, arm_mode::count);
    c.count = 0;
    CHECK(r.arm(c).code() == status::invalid_argument);
    auto p = spec(fault_point::submit_busy, arm_mode::probability);
    p.probability = 1.5;
    CHECK(r.arm(p).code() == status::invalid_argument);
    auto d = spec(fault_point::submit_busy, arm_mode::once);
    d.delay_ms = -1;
    CHECK(r.arm(d).code() == status::invalid_argument);
}

TEST_CASE("declared consumers: a point nobody asks is refused as unsupported") {
    fault_registry r;
    REQUIRE(r.arm(spec(fault_point::client_stall, arm_mode::once)).ok());  // undeclared: everything accepted
    r.clear();
    r.set_consumers({fault_point::ccu_exception, fault_point::sampler_stall});
    CHECK(r.arm(spec(fault_point::ccu_exception, arm_mode::once)).ok());
    CHECK(r.arm(spec(fault_point::sampler_stall, arm_mode::once)).ok());
    auto refused = r.arm(spec(fault_point::client_stall, arm_mode::once));
    CHECK(refused.code() == status::unsupported);
    CHECK(refused.error().message.find("client_stall") != std::string::npos);
    CHECK_FALSE(r.consumed(fault_point::client_stall));
    CHECK(r.list().size() == 2);  // the refused arm is not listed
    r.add_consumer(fault_point::client_stall);
    CHECK(r.consumed(fault_point::client_stall));
    CHECK(r.arm(spec(fault_point::client_stall, arm_mode::once)).ok());
}

TEST_CASE("concurrent checks never over-fire a counted fault") {
    fault_registry r;
    auto c = spec(fault_point::d2h_error, arm_mode::count);
    c.count = 100;
    REQUIRE(r.arm(c).ok());
    std::atomic<int> fired{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&] { fired += fires_in(r, fault_point::d2h_error, 200); });
    for (auto& t : threads) t.join();
    CHECK(fired == 100);
    CHECK(r.fires(fault_point::d2h_error) == 100);
}
