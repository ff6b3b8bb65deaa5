// The pure rules of `calserve soak --real`: gauge parsing, request classification,
// least squares and the leak / growth verdicts, as tables.
#include <catch2/catch.hpp>
#include <vector>

#include "soak/real_soak_stats.hpp"

using namespace calserve::soak;

TEST_CASE("real soak: gauges are read from an exposition page") {
    const std::string page =
        "# HELP process_open_fds x\n# TYPE process_open_fds gauge\nprocess_open_fds 17\n"
        "process_resident_memory_bytes 1.048576e+08\nprocess_threads 9\nprocess_cpu_seconds_total 2.5\n"
        "calserve_kv_blocks_used_other 99\ncalserve_kv_blocks_used 3\ncalserve_inflight_slots 1\n"
        "calserve_requests_running 2\ncalserve_requests_waiting 0\n";
    auto g = parse_gauges(page);
    REQUIRE(g);
    CHECK(g->open_fds == 17);
    CHECK(g->rss_bytes == 104857600);
    CHECK(g->threads == 9);
    CHECK(g->cpu_seconds == 2.5);
    CHECK(g->kv_blocks_used == 3);  // not the longer name that shares its prefix
    CHECK(g->inflight_slots == 1);
    CHECK(g->requests_running == 2);
    CHECK_FALSE(find_sample(page, "process_open").has_value());
    CHECK_FALSE(parse_gauges("calserve_kv_blocks_used 0\ncalserve_inflight_slots 0\n").has_value());  // no process_*
}

TEST_CASE("real soak: how a request ended is classified from what the client saw") {
    struct row {
        seen_end seen;
        request_outcome want;
    };
    auto end = [](int http, std::string code, bool finished = false) {
        seen_end e;
        e.http_status = http;
        e.error_code = std::move(code);
        e.finished = finished;
        return e;
    };
    auto with = [](seen_end e, bool deadline, bool faults, bool closed = false) {
        e.set_deadline = deadline;
        e.faults_armed = faults;
        e.closed_by_client = closed;
        return e;
    };
    const row rows[] = {
        {end(200, "", true), request_outcome::completed},
        {with(end(200, ""), false, false, true), request_outcome::disconnected},
        {with(end(504, "deadline_exceeded"), true, false), request_outcome::deadline},
        {with(end(200, "deadline_exceeded"), true, false), request_outcome::deadline},
        {with(end(504, "deadline_exceeded"), false, false), request_outcome::unexpected},  // no deadline was set
        {end(429, "queue_full"), request_outcome::shed},
        {end(200, "queue_full"), request_outcome::shed},  // slow consumer cancelled mid-stream
        {end(503, "submit_busy"), request_outcome::shed},
        {with(end(503, "ccu_exception"), false, true), request_outcome::fault},
        {with(end(200, "wait_timeout"), false, true), request_outcome::fault},
        {with(end(503, "not_ready"), false, true), request_outcome::fault},
        {with(end(503, "ccu_exception"), false, false), request_outcome::unexpected},  // nobody injected it
        {with(end(503, "job_retries_exhausted"), false, true), request_outcome::retries_exhausted},
        {with(end(200, "job_retries_exhausted"), false, true), request_outcome::retries_exhausted},  // mid-stream
        {with(end(503, "job_retries_exhausted"), false, false), request_outcome::unexpected},  // no fault injected
        {with(end(503, "unknown_sequence"), false, true), request_outcome::unexpected},   // a lost stream
        {with(end(200, "sequence_exists"), false, true), request_outcome::unexpected},
        {with(end(503, "device_dead"), false, true), request_outcome::unexpected},
        {end(500, "internal"), request_outcome::unexpected},
        {end(400, "context_overflow"), request_outcome::unexpected},
        {end(0, ""), request_outcome::unexpected},            // transport failure
        {end(200, ""), request_outcome::unexpected},          // stream without [DONE] or finish_reason
        {end(200, "internal", true), request_outcome::unexpected},
    };
    for (const auto& r : rows) {
        INFO("http=" << r.seen.http_status << " code=" << r.seen.error_code << " deadline=" << r.seen.set_deadline
                     << " faults=" << r.seen.faults_armed);
        CHECK(to_string(classify(r.seen)) == to_string(r.want));
    }
}

TEST_CASE("real soak: least squares fits lines and refuses degenerate input") {
    struct row {
        std::vector<double> x, y;
        bool fits;
        double slope, intercept;
    };
    const row rows[] = {
        {{0, 1, 2, 3}, {1, 3, 5, 7}, true, 2, 1},
        {{0, 1, 2, 3}, {5, 5, 5, 5}, true, 0, 5},
        {{0, 1, 2, 3}, {1, 0, 1, 0}, true, -0.2, 0.8},
        {{10, 20}, {0, -10}, true, -1, 10},
        {{1}, {1}, false, 0, 0},
        {{2, 2, 2}, {1, 2, 3}, false, 0, 0},  // no spread in x
        {{}, {}, false, 0, 0},
    };
    for (const auto& r : rows) {
        auto f = least_squares(r.x, r.y);
        REQUIRE(f.has_value() == r.fits);
        if (!r.fits) continue;
        CHECK(f->slope == Approx(r.slope));
        CHECK(f->intercept == Approx(r.intercept).margin(1e-12));
        CHECK(f->points == r.x.size());
    }
}

TEST_CASE("real soak: the fd leak rule needs a slope over 1 per 100 requests and a rise over the noise") {
    struct row {
        const char* what;
        std::vector<double> requests, fds;
        bool judged, leak;
    };
    const fd_leak_rule rule{0.01, 16, 5};
    const row rows[] = {
        {"flat", {0, 100, 200, 300, 400, 500}, {20, 20, 20, 20, 20, 20}, true, false},
        {"swinging with concurrency", {0, 100, 200, 300, 400, 500}, {12, 28, 14, 27, 13, 29}, true, false},
        {"1 fd per 10 requests", {0, 100, 200, 300, 400, 500}, {20, 30, 40, 50, 60, 70}, true, true},
        {"slope over the rule but rise under the noise", {0, 20, 40, 60, 80, 100}, {20, 21, 22, 23, 24, 25}, true,
         false},
        {"tiny slope over many requests", {0, 2e5, 4e5, 6e5, 8e5, 1e6}, {20, 22, 24, 26, 28, 30}, true, false},
        {"just over: 2 per 100 over 5000 requests", {0, 1000, 2000, 3000, 4000, 5000}, {20, 40, 60, 80, 100, 120},
         true, true},
        {"too few samples", {0, 100, 200, 300}, {20, 40, 60, 80}, false, false},
        {"no requests completed", {7, 7, 7, 7, 7, 7}, {20, 40, 60, 80, 100, 120}, false, false},
        {"shrinking", {0, 100, 200, 300, 400, 500}, {70, 60, 50, 40, 30, 20}, true, false},
    };
    for (const auto& r : rows) {
        INFO(r.what);
        auto v = judge_fds(r.requests, r.fds, rule);
        CHECK(v.judged == r.judged);
        CHECK(v.leak == r.leak);
    }
}

TEST_CASE("real soak: growth warnings need a sustained fitted rise") {
    struct row {
        const char* what;
        std::vector<double> t, v;
        double min_rise;
        bool judged, growing;
    };
    const row rows[] = {
        {"flat", {0, 1, 2, 3, 4}, {100, 100, 100, 100, 100}, 10, true, false},
        {"steady climb", {0, 1, 2, 3, 4}, {100, 110, 120, 130, 140}, 10, true, true},
        {"one spike", {0, 1, 2, 3, 4}, {100, 100, 160, 100, 100}, 10, true, false},
        {"climb under the bar", {0, 1, 2, 3, 4}, {100, 101, 102, 103, 104}, 10, true, false},
        {"too few points", {0, 1, 2}, {100, 200, 300}, 10, false, false},
    };
    for (const auto& r : rows) {
        INFO(r.what);
        auto g = judge_growth(r.t, r.v, r.min_rise);
        CHECK(g.judged == r.judged);
        CHECK(g.growing == r.growing);
    }
}
