// The closed-loop bench in virtual time (soak/closed_loop.hpp) on the replica.
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

[[maybe_unused]] soak::run_summary bench(const std::filesystem::path& package, std::vector<std::string> overrides) {
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
