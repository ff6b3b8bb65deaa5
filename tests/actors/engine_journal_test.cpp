// engine_journal: the bounded record of jobs and device transitions the web
// console shows; alone, then filled by a real engine run.
#include <catch2/catch.hpp>

#include "actors/engine_journal.hpp"
#include "tests/actors/engine_fixture.hpp"

using namespace calserve;
using namespace calserve::actors;

TEST_CASE("engine journal keeps the newest jobs within its bound and answers what is newer", "[journal]") {
    engine_journal j;
    for (std::size_t i = 0; i < k_journal_jobs + 10; ++i) {
        journal_job job;
        job.rows = std::int64_t(i);
        j.record_job(job);
    }
    auto all = j.read(0);
    REQUIRE(all.jobs.size() == k_journal_jobs);
    CHECK(all.jobs.front().seq == 11);
    CHECK(all.jobs.back().seq == k_journal_jobs + 10);
    CHECK(all.last_job == k_journal_jobs + 10);
    auto newer = j.read(all.last_job - 3);
    REQUIRE(newer.jobs.size() == 3);
    CHECK(newer.jobs.front().seq == all.last_job - 2);

    for (std::size_t i = 0; i < k_journal_device_events + 5; ++i) j.record_device(std::int64_t(i), "ready", "faulted", "x");
    auto s = j.read(all.last_job);
    CHECK(s.jobs.empty());
    REQUIRE(s.device_events.size() == k_journal_device_events);
    CHECK(s.device_events.front().seq == 6);
    j.set_slot(1, "submitted");
    j.set_slot(7, "ignored");
    CHECK(j.read(0).slots == std::array<std::string, k_journal_slots>{"free", "submitted"});
}

TEST_CASE("an engine run records its prefill and decode jobs per slot and the device coming up", "[journal][engine]") {
    test::engine_harness h({"log.level=error"});
    auto sink = std::make_shared<test::recording_sink>();
    REQUIRE(h.engine->submit(h.greedy("a", {1, 2, 3, 4, 5}, 6), sink));
    h.run_until_done();
    REQUIRE(sink->finishes == 1);

    auto s = h.engine->journal().read(0);
    REQUIRE(s.jobs.size() >= 6);  // one prefill, then a decode job per further token
    std::size_t prefills = 0, decodes = 0;
    for (const auto& job : s.jobs) {
        CHECK(job.outcome == job_outcome::ok);
        CHECK(job.rows == 1);
        CHECK(job.start_ns <= job.device_done_ns);
        CHECK(job.device_done_ns <= job.end_ns);
        (job.prefill ? prefills : decodes) += 1;
    }
    CHECK(prefills == 1);
    CHECK(s.jobs.front().prefill);
    CHECK(s.jobs.front().tokens == 5);
    CHECK(decodes >= 5);
    CHECK(s.slots == std::array<std::string, k_journal_slots>{"free", "free"});
    // unconfigured -> configuring -> warmup -> ready, each recorded (ready <-> busy is not).
    REQUIRE(s.device_events.size() >= 3);
    CHECK(s.device_events.back().to == "ready");
    for (const auto& e : s.device_events) CHECK(e.to != "busy");
}
