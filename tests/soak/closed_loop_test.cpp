// The closed-loop bench in virtual time (soak/closed_loop.hpp) on the replica, and the
// admission window it chose (runtime.admit_window_us, docs/twin.md section 7): against
// the documents' serving design (decode batch 1 only, one job in flight, no prefix
// cache, no chunking, host sampling) at concurrency 8 with 512-token prompts and 64
// output tokens, calserve's defaults keep the throughput and the TPOT and give back the
// TTFT. Virtual time: deterministic, so the bars are not timed assertions.
#include <catch2/catch.hpp>

#include "model/package/pack.hpp"
#include "soak/closed_loop.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;

namespace {

std::filesystem::path replica(const std::string& tag, std::vector<std::uint32_t> batches, int sampling_head_k) {
    auto dir = test::scratch_dir(tag) / "pkg";
    model::package::pack_options o;
    o.preset = "qwen3-30b-a3b-2chip";
    o.out = dir;
    o.tokenizer_dir = test::tokenizer_dir();
    o.decode_batches = std::move(batches);
    o.sampling_head_k = sampling_head_k;
    auto p = model::package::pack(o);
    INFO((p.ok() ? std::string() : p.error().what()));
    REQUIRE(p.ok());
    return dir;
}

soak::run_summary bench(const std::filesystem::path& package, std::vector<std::string> overrides) {
    soak::closed_loop_options o;
    o.package_dir = package;
    o.overrides = std::move(overrides);
    o.concurrency = 8;
    o.warmup = 8;
    o.requests = 16;
    o.prompt_tokens = 512;
    o.output_tokens = 64;
    auto r = soak::run_closed_loop(o);
    REQUIRE(r.ok());
    CHECK(r->violations.empty());
    REQUIRE(r->summary.requests == 16);
    return r->summary;
}

}  // namespace

TEST_CASE("closed loop: calserve's defaults against the documents' design on the replica", "[closed_loop]") {
    const auto ours = replica("closed-loop-b1248", {1, 2, 4, 8}, 64);
    const auto theirs = replica("closed-loop-b1", {1}, 0);
    const auto documents = bench(theirs, {"runtime.max_inflight=1", "runtime.prefix_cache=false", "runtime.prefill_chunk=0",
                                          "device.sampling_head=false", "runtime.admit_window_us=0"});
    const auto defaults = bench(ours, {});
    INFO("TTFT p50 " << defaults.ttft_ms.p50 << " vs " << documents.ttft_ms.p50 << " ms, TPOT p50 " << defaults.tpot_ms.p50
                     << " vs " << documents.tpot_ms.p50 << " ms, " << defaults.output_tok_s << " vs "
                     << documents.output_tok_s << " tok/s");
    CHECK(defaults.output_tok_s >= 1.6 * documents.output_tok_s);
    CHECK(defaults.tpot_ms.p50 <= 0.6 * documents.tpot_ms.p50);
    CHECK(defaults.ttft_ms.p50 <= documents.ttft_ms.p50);

    SECTION("without the admission window each new prompt waits behind a decode step and another prompt") {
        const auto no_window = bench(ours, {"runtime.admit_window_us=0"});
        CHECK(no_window.ttft_ms.p50 > 1.5 * documents.ttft_ms.p50);
        CHECK(no_window.output_tok_s >= 1.6 * documents.output_tok_s);
    }
}

TEST_CASE("closed loop: never more than the concurrency in flight, each request sent as one finishes", "[closed_loop]") {
    soak::closed_loop_options o;
    o.package_dir = replica("closed-loop-shape", {1, 2, 4, 8}, 64);
    o.concurrency = 2;
    o.warmup = 1;
    o.requests = 5;
    o.prompt_tokens = 16;
    o.output_tokens = 4;
    auto r = soak::run_closed_loop(o);
    REQUIRE(r.ok());
    CHECK(r->violations.empty());
    REQUIRE(r->rows.size() == 5);  // r0 is the warm-up
    for (const auto& row : r->rows) CHECK(row.id != "r0");
    // Closed loop: at any arrival, at most `concurrency` requests are in flight.
    std::vector<std::pair<double, double>> spans;
    for (const auto& row : r->rows) spans.emplace_back(row.submit_ms, row.submit_ms + row.e2e_ms);
    for (const auto& [start, end] : spans) {
        int in_flight = 0;
        for (const auto& [s, e] : spans) in_flight += s <= start && start < e ? 1 : 0;
        CHECK(in_flight <= 2);
    }
    CHECK(r->summary.output_tokens == 5 * 4);
}
