// The latency-priced chunk budget (runtime.prefill_chunk_ms, docs/twin.md section 6)
// on the replica, replayed in virtual time on the real engine: a lone 8,192-token
// prompt pays nothing for chunking (within 5% of its unchunked TTFT), and beside four
// decoding streams it is prefilled in chunks priced within the target, so the
// streams' worst gap stays under a quarter of its TTFT and near the target plus one
// decode step, with a TTFT below the fixed 512-token chunks'. Virtual time:
// deterministic, so the bars are not timed assertions.
#include <catch2/catch.hpp>
#include <spdlog/spdlog.h>

#include <fstream>

#include "io/bench_workload.hpp"
#include "model/package/pack.hpp"
#include "soak/what_if.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;

namespace {

std::filesystem::path replica() {
    auto dir = test::scratch_dir("chunk-budget") / "pkg";
    model::package::pack_options o;
    o.preset = "qwen3-30b-a3b-2chip";
    o.out = dir;
    o.tokenizer_dir = test::tokenizer_dir();
    o.decode_batches = {1, 2, 4, 8};
    auto p = model::package::pack(o);
    INFO((p.ok() ? std::string() : p.error().what()));
    REQUIRE(p.ok());
    return dir;
}

struct request {
    double t_send = 0;
    std::int64_t prompt = 0, max_tokens = 0;
};

// A `calserve bench` workload file: prompts of these lengths, greedy, EOS ignored.
io::trace_file workload(const std::string& name, const std::vector<request>& requests) {
    const auto path = test::scratch_dir("chunk-budget") / (name + ".jsonl");
    {
        std::ofstream out(path);
        for (std::size_t i = 0; i < requests.size(); ++i) {
            const auto& r = requests[i];
            out << R"({"index":)" << i << R"(,"ok":true,"t_send":)" << r.t_send << R"(,"t_first_token":)" << r.t_send
                << R"(,"t_done":)" << r.t_send << R"(,"prompt_tokens":)" << r.prompt << R"(,"max_tokens":)"
                << r.max_tokens << R"(,"completion_tokens":)" << r.max_tokens << R"(,"finish_reason":"length"})" << '\n';
        }
    }
    auto trace = io::read_bench_workload(path.string(), 1, 1000);
    REQUIRE(trace.ok());
    return *trace;
}

struct outcome {
    double long_ttft_ms = 0;      // the 8,192-token prompt's
    double streams_gap_ms = 0;    // the other requests' worst inter-token gap
};

outcome replay(const io::trace_file& trace, const std::filesystem::path& package, std::vector<std::string> overrides) {
    soak::replay_options o;
    o.package_dir = package;
    o.overrides = std::move(overrides);
    o.operator_inputs = false;
    auto w = soak::run_what_if(trace, o, {}, "candidate");
    REQUIRE(w.ok());
    INFO(soak::render_requests(*w));
    outcome out;
    for (const auto& r : w->predicted_rows) {
        REQUIRE(r.output_tokens > 0);
        if (r.id == "bench-0") out.long_ttft_ms = r.ttft_ms;
        else out.streams_gap_ms = std::max(out.streams_gap_ms, r.max_gap_ms);
    }
    return out;
}

}  // namespace

TEST_CASE("chunk budget: a lone prompt runs unchunked, streams beside one keep a bounded gap", "[what_if][chunked]") {
    spdlog::set_level(spdlog::level::err);
    const auto package = replica();
    const std::vector<std::string> defaults;  // runtime.prefill_chunk_ms's default prices the chunks
    const std::vector<std::string> whole = {"runtime.prefill_chunk=0"};

    const auto lone = workload("lone", {{0, 8192, 2}});
    const auto lone_whole = replay(lone, package, whole);
    const auto lone_default = replay(lone, package, defaults);
    INFO("lone: " << lone_default.long_ttft_ms << " ms against " << lone_whole.long_ttft_ms << " ms unchunked");
    CHECK(lone_default.long_ttft_ms <= 1.05 * lone_whole.long_ttft_ms);

    // bench-0 (the long prompt) arrives 0.3 s after four short prompts whose streams outlast its prefill.
    const auto beside = workload("beside", {{0.3, 8192, 2}, {0, 16, 160}, {0, 16, 160}, {0, 16, 160}, {0, 16, 160}});
    const auto priced = replay(beside, package, defaults);
    const auto fixed = replay(beside, package, {"runtime.prefill_chunk_ms=0"});  // 512-token chunks
    const auto unchunked = replay(beside, package, whole);
    INFO("priced: TTFT " << priced.long_ttft_ms << " ms, worst gap " << priced.streams_gap_ms << " ms; fixed 512: "
                         << fixed.long_ttft_ms << " / " << fixed.streams_gap_ms << "; whole: " << unchunked.long_ttft_ms
                         << " / " << unchunked.streams_gap_ms);
    CHECK(priced.streams_gap_ms <= priced.long_ttft_ms / 4);
    CHECK(priced.streams_gap_ms <= 150 + 25);                   // the target plus about one decode step
    CHECK(priced.long_ttft_ms <= 0.8 * fixed.long_ttft_ms);     // fewer weight re-reads than 512-token chunks
    CHECK(unchunked.streams_gap_ms >= 0.9 * unchunked.long_ttft_ms);  // what chunking buys: whole, they wait it out
}
