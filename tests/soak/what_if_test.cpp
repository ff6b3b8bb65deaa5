// The what-if replay (soak/what_if.hpp): summaries as pure functions, the twin
// being the replay's own engine, and its fidelity against a recorded daemon run.
#include <catch2/catch.hpp>
#include <spdlog/spdlog.h>
#include <sstream>

#include "io/atomic_dir.hpp"
#include "io/trace.hpp"
#include "model/package/pack.hpp"
#include "soak/soak.hpp"
#include "soak/what_if.hpp"
#include "tests/support/model_support.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;

namespace {

// The default package's preset packed with decode batch 1 only (the documents' profile).
const std::filesystem::path& batch1_package() {
    static const std::filesystem::path dir = [] {
        auto d = test::binary_dir() / "test-packages" / "tiny-dense-1chip-b1";
        auto made = io::build_directory_atomically(
            d, [](const std::filesystem::path& p) { return std::filesystem::exists(p / "validation.json"); },
            [](const std::filesystem::path& p) -> void_result {
                model::package::pack_options o;
                o.preset = "tiny-dense-1chip";
                o.out = p;
                o.tokenizer_dir = test::tokenizer_dir();
                o.decode_batches = {1};
                if (auto r = model::package::pack(o); !r) return r.error();
                return {};
            });
        if (!made) FAIL("pack: " << made.error().what());
        return d;
    }();
    return dir;
}

// A daemon run recorded with `calserve serve --trace --set device.sim.step_ms=10` on the
// default package and `calserve bench --concurrency 4 --requests 40` (docs/twin.md has the
// commands); its message records were left out to keep the file small, its inputs and the
// daemon's measured outcomes (`done`) are as written.
io::trace_file recorded_daemon_run() {
    auto t = io::read_trace((test::source_dir() / "tests/soak/data/daemon-step10-c4.trace.jsonl").string());
    if (!t) FAIL(t.error().message);
    return *t;
}

double ratio(double predicted, double recorded) { return recorded > 0 ? predicted / recorded : 0; }

}  // namespace

TEST_CASE("what-if summaries: percentiles, TPOT, window, throughput and goodput from the rows", "[what_if]") {
    std::vector<soak::request_times> rows = {
        {"a", 0, 10, 2, 30, 11},     // (30 - 10) / 10 = 2 ms per token
        {"b", 5, 40, 4, 80, 11},
        {"c", 10, 20, -1, 20, 1},    // one token: no TPOT
        {"d", 15, -1, -1, 5, 0},     // no token (cancelled early)
    };
    soak::slo_targets slo{30, 3};
    auto s = soak::summarize(rows, slo);
    CHECK(s.requests == 4);
    CHECK(s.ttft_ms.count == 3);
    CHECK(s.ttft_ms.p50 == Approx(20));
    CHECK(s.tpot_ms.count == 2);
    CHECK(s.tpot_ms.p50 == Approx(3));
    CHECK(s.output_tokens == 23);
    CHECK(s.window_s == Approx(0.085));  // first arrival 0 to last finish 5 + 80
    CHECK(s.output_tok_s == Approx(23 / 0.085));
    CHECK(s.met_slo == 2);                // a (10 ms, 2 ms) and c (20 ms, no TPOT); b misses both, d has no token
    CHECK(s.goodput_rps == Approx(2 / 0.085));
    CHECK(s.ttft_ms.p99 <= 40);
    CHECK(soak::summarize({}, slo).requests == 0);
}

TEST_CASE("recorded times come from the daemon's done records, arrivals from their submits", "[what_if]") {
    io::trace_file t;
    io::trace_submit s;
    s.t_ns = 2'000'000;
    s.id = "r1";
    t.inputs.emplace_back(s);
    t.done.push_back(io::trace_done{50'000'000, "r1", "length", 5, 8'000'000, 48'000'000, 0});
    t.done.push_back(io::trace_done{60'000'000, "before-the-window", "length", 5, 1, 2, 0});
    auto rows = soak::recorded_times(t);
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].submit_ms == Approx(2));
    CHECK(rows[0].ttft_ms == Approx(8));
    CHECK(rows[0].tpot_ms == Approx(10));  // (48 - 8) / 4
    CHECK(rows[0].e2e_ms == Approx(48));
}

TEST_CASE("one engine: a what-if on the recording's own configuration delivers the recorded message stream",
          "[what_if][replay]") {
    spdlog::set_level(spdlog::level::err);
    const auto& package = test::test_package_dir("tiny-dense-1chip");
    auto path = (test::scratch_dir("what-if") / "seed3.jsonl").string();
    soak::soak_options o;
    o.seed = 3;
    o.duration_ns = 15'000'000'000;
    o.package_dir = package;
    o.model_dir = package;  // unused with a package
    o.trace_path = path;
    o.check_reference = false;
    std::ostringstream out;
    auto run = soak::run_soak(o, out);
    REQUIRE(run.ok());
    auto trace = io::read_trace(path);
    REQUIRE(trace.ok());
    soak::replay_options own;  // everything applied, as recorded
    auto w = soak::run_what_if(*trace, own, {}, "own");
    REQUIRE(w.ok());
    CHECK(w->stream_identical);
    CHECK(w->messages_compared == run->report.messages);
    // Its predictions are that run's requests.
    CHECK(w->predicted_rows.size() == run->report.submitted - run->report.rejected);
    CHECK(w->predicted.output_tok_s > 0);
    // Another configuration is another stream.
    soak::replay_options other;
    other.overrides = {"device.sim.step_ms=25"};
    auto x = soak::run_what_if(*trace, other, {}, "slower");
    REQUIRE(x.ok());
    CHECK_FALSE(x->stream_identical);
    CHECK(x->predicted.ttft_ms.p50 > w->predicted.ttft_ms.p50);
}

TEST_CASE("fidelity: a recorded daemon run replayed on its own configuration predicts its TTFT and TPOT",
          "[what_if][fidelity]") {
    spdlog::set_level(spdlog::level::err);
    auto trace = recorded_daemon_run();
    REQUIRE(trace.done.size() >= 40);
    soak::replay_options own;
    own.operator_inputs = false;
    own.package_dir = test::test_package_dir("tiny-dense-1chip");  // the default package, packed here
    auto w = soak::run_what_if(trace, own, {}, "own");
    REQUIRE(w.ok());
    REQUIRE(w->recorded);
    INFO(soak::render_table(std::span(&*w, 1)));
    const auto& p = w->predicted;
    const auto& r = *w->recorded;
    CHECK(p.requests == r.requests);
    CHECK(ratio(p.ttft_ms.p50, r.ttft_ms.p50) == Approx(1).margin(0.10));
    CHECK(ratio(p.tpot_ms.p50, r.tpot_ms.p50) == Approx(1).margin(0.10));
    CHECK(ratio(p.ttft_ms.p99, r.ttft_ms.p99) == Approx(1).margin(0.20));
    CHECK(ratio(p.tpot_ms.p99, r.tpot_ms.p99) == Approx(1).margin(0.20));

    // The documents' decode profile (batch 1 only): the same traffic at half the throughput or less.
    soak::replay_options b1 = own;
    b1.package_dir = batch1_package();
    auto one = soak::run_what_if(trace, b1, {}, "b1");
    REQUIRE(one.ok());
    INFO(soak::render_table(std::span(&*one, 1)));
    CHECK(one->predicted.output_tok_s * 2 <= r.output_tok_s);
    CHECK(one->predicted.output_tok_s * 2 <= p.output_tok_s);
}
