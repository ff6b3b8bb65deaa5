// Statistics of calserve bench (loadgen/stats, loadgen/report, loadgen/run's
// pure parts): hand-computed values, determinism, and edge cases.
#include <catch2/catch.hpp>
#include <vector>

#include "loadgen/report.hpp"
#include "loadgen/run.hpp"
#include "loadgen/stats.hpp"

using namespace calserve::loadgen;

TEST_CASE("bench percentiles interpolate between closest ranks", "[bench]") {
    const std::vector<double> v{5, 1, 4, 2, 3};
    CHECK(percentile(v, 0) == 1.0);
    CHECK(percentile(v, 50) == 3.0);
    CHECK(percentile(v, 100) == 5.0);
    CHECK(percentile(v, 25) == Approx(2.0));
    CHECK(percentile(v, 90) == Approx(4.6));
    const std::vector<double> two{10, 20};
    CHECK(percentile(two, 99) == Approx(19.9));
    CHECK(percentile(std::vector<double>{}, 50) == 0.0);
    CHECK(percentile(std::vector<double>{7}, 99) == 7.0);
}

TEST_CASE("bench mean and MAD", "[bench]") {
    const std::vector<double> v{1, 1, 2, 2, 4, 6, 9};
    CHECK(mean(v) == Approx(25.0 / 7.0));
    CHECK(median(v) == 2.0);
    CHECK(mad(v) == 1.0);  // deviations 1 1 0 0 2 4 7 -> median 1
    CHECK(mad(std::vector<double>{}) == 0.0);
}

TEST_CASE("bench bootstrap CI is seeded, deterministic and brackets the mean", "[bench]") {
    std::vector<double> v;
    for (int i = 0; i < 200; ++i) v.push_back(static_cast<double>((i * 37) % 101));
    const auto a = bootstrap_mean_ci(v, 42);
    const auto b = bootstrap_mean_ci(v, 42);
    const auto c = bootstrap_mean_ci(v, 43);
    CHECK(a.lo == b.lo);
    CHECK(a.hi == b.hi);
    CHECK((a.lo != c.lo || a.hi != c.hi));
    CHECK(a.lo < mean(v));
    CHECK(a.hi > mean(v));
    CHECK(a.hi - a.lo < 20.0);
    const std::vector<double> flat(50, 3.0);
    const auto f = bootstrap_mean_ci(flat, 1);
    CHECK(f.lo == 3.0);
    CHECK(f.hi == 3.0);
}

TEST_CASE("bench TPOT and inter-token gaps", "[bench]") {
    CHECK(*request_tpot(1.0, 0.1, 10) == Approx(0.1));
    CHECK_FALSE(request_tpot(1.0, 0.1, 1).has_value());
    CHECK_FALSE(request_tpot(0.05, 0.1, 5).has_value());
    const std::vector<double> t{0.5, 0.6, 0.8};
    const auto g = inter_token_gaps(t);
    REQUIRE(g.size() == 2);
    CHECK(g[0] == Approx(0.1));
    CHECK(g[1] == Approx(0.2));
}

TEST_CASE("bench Little's law from overlapping intervals", "[bench]") {
    // Two requests of 2 s each, always both in flight over [0, 2]: L = 2.
    const std::vector<span_interval> spans{{0, 2}, {0, 2}};
    CHECK(mean_concurrency(spans, 0, 2) == Approx(2.0));
    // A request outside the window is clipped away.
    const std::vector<span_interval> clipped{{0, 2}, {3, 4}};
    CHECK(mean_concurrency(clipped, 0, 2) == Approx(1.0));
    const auto l = littles_law_check(2.0, 2, 2.0, 2.0);  // lambda 1/s, W 2 s
    CHECK(l.predicted == Approx(2.0));
    CHECK(l.ratio == Approx(1.0));
    CHECK(littles_law_check(1.0, 0, 0.0, 0.0).ratio == 0.0);
}

namespace {
request_record rec(double send, double first, double done, std::int64_t tokens, bool warm = false) {
    request_record r;
    r.ok = true;
    r.warmup = warm;
    r.t_send = send;
    r.t_first_token = first;
    r.t_done = done;
    r.completion_tokens = tokens;
    for (std::int64_t i = 0; i < tokens; ++i)
        r.token_times.push_back(first + (done - first) * static_cast<double>(i) / static_cast<double>(std::max<std::int64_t>(1, tokens - 1)));
    return r;
}
}  // namespace

TEST_CASE("bench run summary counts, SLO goodput and Little's law", "[bench]") {
    std::vector<request_record> recs{rec(0, 0.1, 1.1, 11), rec(0, 0.3, 2.3, 11), rec(0, 0.05, 0.5, 2, true)};
    request_record failed;
    failed.t_send = 0.5;
    failed.t_done = 0.6;
    failed.error = "HTTP 503";
    recs.push_back(failed);
    const auto s = summarize_run(recs, slo{200.0, 150.0}, 7);
    CHECK(s.measured == 3);
    CHECK(s.succeeded == 2);
    CHECK(s.failed == 1);
    CHECK(s.met_slo == 1);  // the second misses the TTFT SLO (300 ms)
    CHECK(s.output_tokens == 22);
    CHECK(s.window_s == Approx(2.3));
    CHECK(s.ttft_ms.mean == Approx(200.0));
    CHECK(s.tpot_ms.mean == Approx(150.0));  // 100 and 200 ms
    CHECK(s.e2e_ms.p50 == Approx(1700.0));
    CHECK(s.itl_ms.count == 20);
    CHECK(s.goodput == Approx(1.0 / 2.3));
    // L measured from every request on the wire (warm-up and failure included).
    CHECK(s.littles.mean_concurrency == Approx((1.1 + 2.3 + 0.5 + 0.1) / 2.3));
    CHECK(s.littles.predicted == Approx(2.0 / 2.3 * 1.7));
    const auto again = summarize_run(recs, slo{200.0, 150.0}, 7);
    CHECK(again.e2e_ms.mean_ci.lo == s.e2e_ms.mean_ci.lo);
    CHECK(summarize_run({}, slo{}, 1).succeeded == 0);
}

TEST_CASE("bench compare ratios are B over A", "[bench]") {
    std::vector<request_record> a{rec(0, 0.1, 1.1, 11)};
    std::vector<request_record> b{rec(0, 0.2, 2.2, 11)};
    const auto r = compare_ratios(summarize_run(a, {}, 1), summarize_run(b, {}, 1));
    CHECK(r.at("e2e_mean").as_double() == Approx(2.0));
    CHECK(r.at("ttft_mean").as_double() == Approx(2.0));
    CHECK(r.at("token_throughput").as_double() == Approx(0.5));
}

TEST_CASE("bench workload: token counts, caps, arrivals and prompts", "[bench]") {
    CHECK(*parse_token_count("256") == 256);
    CHECK(*parse_token_count("2K") == 2048);
    CHECK(*parse_token_count("40k") == 40960);
    CHECK_FALSE(parse_token_count("x").has_value());
    CHECK_FALSE(parse_token_count("0").has_value());
    CHECK(cap_prompt(40960, 32, 4096) == 4064);
    CHECK(cap_prompt(16, 32, 4096) == 16);
    CHECK(cap_prompt(16, 5000, 4096) == 1);
    CHECK(prompt_buckets().back() == 40960);

    const auto c = arrival_times(5, 4.0, arrival_kind::constant, 1);
    CHECK(c[4] == Approx(1.0));
    const auto p1 = arrival_times(2000, 10.0, arrival_kind::poisson, 9);
    const auto p2 = arrival_times(2000, 10.0, arrival_kind::poisson, 9);
    CHECK(p1 == p2);
    CHECK(p1.back() / 1999.0 == Approx(0.1).epsilon(0.1));  // mean gap 1/rate
    for (std::size_t i = 1; i < p1.size(); ++i) REQUIRE(p1[i] >= p1[i - 1]);
    CHECK(arrival_times(3, 1.0, arrival_kind::closed, 1) == std::vector<double>(3, 0.0));

    const std::vector<std::int64_t> corpus{1, 2, 3, 4, 5, 6, 7};
    const auto prompts = cut_prompts(corpus, 10, 4, 3);
    REQUIRE(prompts.size() == 4);
    for (const auto& p : prompts) {
        REQUIRE(p.size() == 10);
        for (std::size_t k = 1; k < p.size(); ++k) CHECK(p[k] == p[k - 1] % 7 + 1);  // a wrapped window
    }
    CHECK(cut_prompts(corpus, 10, 4, 3) == prompts);
}

TEST_CASE("bench window sums rounds, so --compare gaps are not counted", "[bench]") {
    std::vector<request_record> recs{rec(0, 0.1, 1.0, 4), rec(5, 5.1, 6.0, 4)};
    recs[1].round = 1;
    const auto s = summarize_run(recs, {}, 1);
    CHECK(s.window_s == Approx(2.0));
    CHECK(s.request_throughput == Approx(1.0));
    CHECK(s.littles.mean_concurrency == Approx(1.0));
    CHECK(s.littles.ratio == Approx(1.0));
    recs[1].round = 0;  // one round: the 4 s gap is wall time
    CHECK(summarize_run(recs, {}, 1).window_s == Approx(6.0));
}
