// The DeviceActor's recovery policy (actors/recovery_policy.hpp), table-driven without an actor.
#include <catch2/catch.hpp>
#include <random>

#include "actors/recovery_policy.hpp"

using namespace calserve;
using namespace calserve::actors;
using namespace std::chrono_literals;

TEST_CASE("a job is retried for retryable and capacity refusals below the limit", "[actors][policy][recovery]") {
    struct row {
        fault_class cls;
        int attempt;
        bool job, golden;
    };
    const row rows[] = {
        {fault_class::retryable, 0, true, true},   {fault_class::retryable, 5, true, true},
        {fault_class::retryable, 6, false, false}, {fault_class::capacity, 0, true, false},
        {fault_class::capacity, 6, false, false},  {fault_class::device, 0, false, false},
        {fault_class::request, 0, false, false},   {fault_class::model, 0, false, false},
        {fault_class::internal, 0, false, false},
    };
    for (const auto& r : rows) {
        INFO(to_string(r.cls) << " attempt " << r.attempt);
        CHECK(retries_job(r.cls, r.attempt, 6) == r.job);
        CHECK(retries_golden(r.cls, r.attempt, 6) == r.golden);
    }
}

TEST_CASE("retry delays double from the base", "[actors][policy][recovery]") {
    CHECK(retry_delay(1ms, 0) == 1ms);
    CHECK(retry_delay(1ms, 1) == 2ms);
    CHECK(retry_delay(1ms, 5) == 32ms);
    CHECK(retry_delay(3ms, 3) == 24ms);
    CHECK(retry_delay(0ms, 4) == 0ms);
    CHECK(retry_delay(1ns, 40) == std::chrono::nanoseconds(1 << 20));  // no overflow past a sane limit
}

TEST_CASE("a recovery's reset steps: at once, after backoff, then give up", "[actors][policy][recovery]") {
    struct row {
        int failed, limit;
        reset_next next;
    };
    const row rows[] = {
        {0, 3, reset_next::attempt_now},           {1, 3, reset_next::attempt_after_backoff},
        {3, 3, reset_next::attempt_after_backoff}, {4, 3, reset_next::give_up},
        {0, 0, reset_next::attempt_now},           {1, 0, reset_next::give_up},
    };
    for (const auto& r : rows) {
        INFO(r.failed << " failed, limit " << r.limit);
        CHECK(next_reset(r.failed, r.limit) == r.next);
    }
}

TEST_CASE("reset backoff doubles per failure up to its cap", "[actors][policy][recovery]") {
    const reset_backoff_params p{50ms, 5s};
    struct row {
        int failed;
        std::chrono::nanoseconds ceiling;
    };
    const row rows[] = {{0, 0ms}, {1, 50ms}, {2, 100ms}, {3, 200ms}, {7, 3200ms}, {8, 5s}, {100, 5s}};
    for (const auto& r : rows) {
        INFO(r.failed << " failed");
        CHECK(reset_backoff_ceiling(p, r.failed) == r.ceiling);
    }
    CHECK(reset_backoff_ceiling({0ms, 5s}, 3) == 0ms);  // no base: no wait between attempts
}

TEST_CASE("equal jitter draws in [d/2, d] and replays from its seed", "[actors][policy][recovery]") {
    std::mt19937_64 a(7), b(7);
    for (int i = 0; i < 200; ++i) {
        const auto d = std::chrono::nanoseconds(100 + i * 1000);
        const auto x = equal_jitter(d, a);
        CHECK(x >= d / 2);
        CHECK(x <= d);
        CHECK(x == equal_jitter(d, b));
    }
    std::mt19937_64 untouched(7), c(7);
    CHECK(equal_jitter(0ns, c) == 0ns);
    CHECK(equal_jitter(1ns, c) == 1ns);
    CHECK(c() == untouched());  // nothing drawn for a wait too short to jitter
}
