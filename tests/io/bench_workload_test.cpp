// A `calserve bench` requests.jsonl read as a what-if workload (io/bench_workload.hpp).
#include <catch2/catch.hpp>
#include <fstream>

#include "io/bench_workload.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;

TEST_CASE("bench workload: submits at the send times, the client's times as done records", "[trace][workload]") {
    const auto path = (test::scratch_dir("bench-workload") / "requests.jsonl").string();
    {
        std::ofstream f(path);
        f << R"({"index":1,"ok":true,"prompt_tokens":5,"max_tokens":4,"completion_tokens":4,"finish_reason":"length","t_send":2.5,"t_first_token":2.53,"t_done":2.6})" "\n"
          << R"({"index":0,"ok":true,"prompt_tokens":3,"max_tokens":4,"completion_tokens":4,"finish_reason":"length","t_send":2.0,"t_first_token":2.02,"t_done":2.1})" "\n"
          << R"({"index":2,"ok":false,"prompt_tokens":3,"max_tokens":4,"completion_tokens":0,"finish_reason":"","t_send":2.7,"t_first_token":-1,"t_done":2.8})" "\n";
    }
    CHECK(io::is_bench_workload(path));
    auto w = io::read_bench_workload(path, 1, 100);
    REQUIRE(w.ok());
    CHECK(w->header.source == "bench");
    REQUIRE(w->inputs.size() == 2);  // the failed request is skipped
    const auto& first = std::get<io::trace_submit>(w->inputs[0]);
    const auto& second = std::get<io::trace_submit>(w->inputs[1]);
    CHECK(first.id == "bench-0");   // in send order, from the first send
    CHECK(first.t_ns == 0);
    CHECK(second.t_ns == 500'000'000);
    CHECK(first.prompt.size() == 3);
    CHECK(second.prompt.size() == 5);
    for (auto t : second.prompt) CHECK((t >= 0 && t < 100));
    CHECK(first.max_tokens == 4);
    CHECK(first.ignore_eos);
    REQUIRE(w->done.size() == 2);
    CHECK(w->done[0].ttft_ns == 20'000'000);
    CHECK(w->done[0].e2e_ns == 100'000'000);
    CHECK(w->done[0].output_tokens == 4);
    // Same seed, same prompts.
    auto again = io::read_bench_workload(path, 1, 100);
    REQUIRE(again.ok());
    CHECK(std::get<io::trace_submit>(again->inputs[1]).prompt == second.prompt);
    // A trace is not a workload; a file with no successful request is an error.
    const auto trace = (test::scratch_dir("bench-workload") / "trace.jsonl").string();
    std::ofstream(trace) << R"({"k":"header","t_send":0})" "\n";
    CHECK_FALSE(io::is_bench_workload(trace));
    const auto failed = (test::scratch_dir("bench-workload") / "failed.jsonl").string();
    std::ofstream(failed) << R"({"index":0,"ok":false,"t_send":1})" "\n";
    CHECK_FALSE(io::read_bench_workload(failed, 1, 100).ok());
}
