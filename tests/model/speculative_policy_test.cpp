// The drafting policy as a table: when it drafts, how much, and how acceptance moves it.
#include <catch2/catch.hpp>

#include "model/speculative/options.hpp"

using namespace calserve::model::speculative;

namespace {
policy_options on() {
    policy_options o;
    o.enabled = true;
    o.max_drafts = 4;
    o.max_batch = 4;
    return o;
}
step_facts facts(std::int64_t rows, double cost, std::int64_t left = 100, bool compute_bound = false) {
    return step_facts{rows, compute_bound, cost, left};
}
}  // namespace

TEST_CASE("draft_length: the table of rule 1 (never draft)") {
    const acceptance high{0.9, 0};
    policy_options off = on();
    off.enabled = false;
    CHECK(draft_length(off, high, facts(1, 0.05)) == 0);
    CHECK(draft_length(on(), high, facts(5, 0.05)) == 0);        // batch above max_batch
    CHECK(draft_length(on(), high, facts(1, 0.05, 100, true)) == 0);  // compute-bound
    CHECK(draft_length(on(), high, facts(1, 0.05, 1)) == 0);     // one token left
    CHECK(draft_length(on(), high, facts(1, 0.05, 3)) == 2);     // capped by tokens left - 1
}

TEST_CASE("draft_length: k maximises expected tokens per step cost") {
    CHECK(draft_length(on(), {0.9, 0}, facts(1, 0.02)) == 4);   // cheap positions, high acceptance: all
    CHECK(draft_length(on(), {0.5, 0}, facts(1, 0.02)) >= 2);
    CHECK(draft_length(on(), {0.5, 0}, facts(1, 0.3)) == 1);    // dear positions: one draft
    CHECK(draft_length(on(), {0.1, 0}, facts(1, 0.02)) == 0);   // low acceptance: plain decode
    CHECK(draft_length(on(), {0.0, 0}, facts(1, 0.0)) == 0);    // no gain, even for free
}

TEST_CASE("position_cost: one more position from the device's prices of the plain and verify steps") {
    struct row {
        double plain, verify;
        std::int64_t drafts;
        double want;
    };
    const row table[] = {
        {10, 16, 4, 0.15},      // cpu backend, 1 row: 5 positions cost 1.6 steps (weights streamed once)
        {10, 30, 4, 0.5},       // cpu backend, 4 rows: 20 positions cost 3.0 steps (compute-bound)
        {5.76, 6.30, 1, 0.09375},
        {10, 10, 4, 0.0},       // free positions (a step that only reads weights)
        {10, 9, 4, 0.0},        // a noisy price below the plain step: never negative
        {0, 16, 4, 0.1},        // the device cannot price the plain step: the fixed value
        {10, 0, 4, 0.1},        // nor the verify step
        {10, 16, 0, 0.1},       // no drafts to price
    };
    for (const auto& r : table) {
        INFO(r.plain << " -> " << r.verify << " with " << r.drafts << " drafts");
        CHECK(position_cost(r.plain, r.verify, r.drafts) == Approx(r.want));
    }
    CHECK(position_cost(0, 0, 4, 0.25) == 0.25);
}

TEST_CASE("draft_length with the cpu backend's prices: it drafts less at 4 rows, where verify costs more") {
    const double one_row = position_cost(1.0, 1.6, 4), four_rows = position_cost(1.0, 3.0, 4);
    CHECK(draft_length(on(), {0.8, 0}, facts(1, one_row)) == 4);
    CHECK(draft_length(on(), {0.8, 0}, facts(4, four_rows)) == 2);
    CHECK(draft_length(on(), {0.6, 0}, facts(1, one_row)) == 2);
    CHECK(draft_length(on(), {0.6, 0}, facts(4, four_rows)) == 0);  // plain decode
}

TEST_CASE("draft_length: a sequence that stopped drafting probes once in a while") {
    const auto o = on();
    CHECK(draft_length(o, {0.05, o.probe_every - 1}, facts(1, 0.05)) == 0);
    CHECK(draft_length(o, {0.05, o.probe_every}, facts(1, 0.05)) == 1);
    policy_options never = o;
    never.probe_every = 0;
    CHECK(draft_length(never, {0.05, 1000}, facts(1, 0.05)) == 0);
}

TEST_CASE("observe: acceptance moves towards what verifies show") {
    const auto o = on();
    acceptance a = initial_acceptance(o);
    CHECK(a.rate == Approx(0.5));
    for (int i = 0; i < 20; ++i) observe(o, a, 4, 4);
    CHECK(a.rate > 0.95);
    for (int i = 0; i < 20; ++i) observe(o, a, 4, 0);
    CHECK(a.rate < 0.05);
    observe(o, a, 0, 0);
    observe(o, a, 0, 0);
    CHECK(a.plain_steps == 2);
    const double before = a.rate;
    observe(o, a, 2, 1);  // one accepted, one rejected: 1/2 seen
    CHECK(a.plain_steps == 0);
    CHECK(a.rate == Approx(0.7 * before + 0.3 * 0.5));
    CHECK(expected_tokens(0.5, 2) == Approx(1.75));
    CHECK(expected_tokens(1.0, 4) == Approx(5));
}

TEST_CASE("runtime.speculative.* give the drafter and the policy") {
    auto cfg = calserve::config::defaults();
    auto o = speculative_options::from_config(cfg);
    CHECK_FALSE(o.enabled());  // off by default
    CHECK_FALSE(o.policy.enabled);
    CHECK(make_drafter(o.drafter) == nullptr);
    REQUIRE(cfg.set("runtime.speculative.method=ngram").ok());
    REQUIRE(cfg.set("runtime.speculative.draft_tokens=6").ok());
    REQUIRE(cfg.set("runtime.speculative.ngram_min=4").ok());
    REQUIRE(cfg.set("runtime.speculative.ngram_max=2").ok());
    REQUIRE(cfg.set("runtime.speculative.max_batch=8").ok());
    o = speculative_options::from_config(cfg);
    CHECK(o.enabled());
    CHECK(o.policy.enabled);
    CHECK(o.policy.max_drafts == 6);
    CHECK(o.policy.max_batch == 8);
    CHECK(o.drafter.ngram.n_min == 4);
    CHECK(o.drafter.ngram.n_max == 4);  // raised to n_min
    CHECK_FALSE(cfg.set("runtime.speculative.method=eagle").ok());
    CHECK_FALSE(cfg.set("runtime.speculative.draft_tokens=8").ok());  // beyond the device's verify width
}
