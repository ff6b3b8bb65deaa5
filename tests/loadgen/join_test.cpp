// calserve bench's pure parts added for three clocks and sweeps: the timing-log
// join (joined, unjoined and id-less records all counted), the three-clock
// summary, --sweep parsing (bad specs give a clear error), cells and context
// skipping, and the prompt cutter (exact token counts for every bucket).
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "loadgen/join.hpp"
#include "loadgen/run.hpp"
#include "loadgen/sweep.hpp"

using namespace calserve::loadgen;

namespace {

request_record client(const std::string& id, double send, double first, double done, bool warm = false) {
    request_record r;
    r.ok = true;
    r.warmup = warm;
    r.request_id = id;
    r.t_send = send;
    r.t_first_token = first;
    r.t_done = done;
    r.completion_tokens = 4;
    return r;
}

const char* k_log =
    R"({"id":"cmpl-1","ttft_s":0.020,"e2e_s":0.090,"queue_s":0.001,"server_ttft_s":0.015,"server_e2e_s":0.080,)"
    R"("device_s":0.040,"device_first_s":0.010,"device_wall_s":0.060,"device_steps":4,"completion_tokens":4})"
    "\n"
    "not json at all\n"
    "\n"
    R"({"route":"completions"})"
    "\n"
    R"({"id":"cmpl-2","ttft_s":0.030,"e2e_s":0.150,"server_ttft_s":0.025,"server_e2e_s":0.140,)"
    R"("device_s":0.060,"device_first_s":0.020,"device_wall_s":0.100,"device_steps":4})"
    "\n"
    R"({"id":"cmpl-old","ttft_s":0.5,"e2e_s":0.9,"server_ttft_s":0.4,"server_e2e_s":0.8})"
    "\n";

}  // namespace

TEST_CASE("bench timing log parses ids and counts malformed lines", "[bench][join]") {
    const auto idx = parse_timing_log(k_log);
    CHECK(idx.lines == 5);
    CHECK(idx.malformed == 2);
    REQUIRE(idx.by_id.size() == 3);
    const auto& one = idx.by_id.at("cmpl-1");
    CHECK(one.edge_ttft_s == Approx(0.020));
    CHECK(one.engine_e2e_s == Approx(0.080));
    CHECK(one.has_device);
    CHECK(one.device_steps == 4);
    CHECK_FALSE(idx.by_id.at("cmpl-old").has_device);
    CHECK(parse_timing_log("").by_id.empty());
}

TEST_CASE("bench join by request id: joined, unjoined and id-less records are all counted", "[bench][join]") {
    std::vector<request_record> recs{client("cmpl-1", 0, 0.025, 0.1), client("cmpl-2", 0, 0.04, 0.2),
                                     client("cmpl-missing", 0, 0.05, 0.3), client("", 0, 0.05, 0.3),
                                     client("cmpl-old", 0, 0.6, 1.0, true)};
    recs[3].ok = false;
    const auto stats = join_timing(recs, parse_timing_log(k_log));
    CHECK(stats.joined == 3);
    CHECK(stats.unjoined == 1);
    CHECK(stats.no_id == 1);
    CHECK(stats.joined + stats.unjoined + stats.no_id == recs.size());
    for (const auto& r : recs) CHECK(r.join_tried);
    REQUIRE(recs[0].joined);
    CHECK(recs[0].joined->device_s == Approx(0.040));
    CHECK_FALSE(recs[2].joined);

    const auto record = record_json(recs[0]);
    CHECK(record.at("server_joined").as_bool());
    CHECK(record.at("device_steps").as_int64() == 4);
    CHECK(record.at("server_engine_e2e_s").as_double() == Approx(0.080));
    CHECK_FALSE(record_json(recs[2]).at("server_joined").as_bool());
    CHECK_FALSE(record_json(recs[2]).contains("device_s"));

    // Joining again (a re-read log) replaces, never accumulates.
    const auto again = join_timing(recs, parse_timing_log(""));
    CHECK(again.unjoined == 4);
    CHECK_FALSE(recs[0].joined);
}

TEST_CASE("bench three clocks: client vs server vs device, overhead and per-step host time", "[bench][join]") {
    std::vector<request_record> recs{client("cmpl-1", 0, 0.025, 0.1), client("cmpl-2", 0, 0.04, 0.2),
                                     client("cmpl-missing", 0, 0.05, 0.3), client("cmpl-old", 0, 0.6, 1.0, true)};
    (void)join_timing(recs, parse_timing_log(k_log));
    const auto c = summarize_clocks(recs, 1);
    // Measured only: the warm-up record is neither joined nor unjoined here.
    CHECK(c.join.joined == 2);
    CHECK(c.join.unjoined == 1);
    CHECK(c.has_device);
    CHECK(c.client_ttft_ms.count == 2);
    CHECK(c.client_ttft_ms.mean == Approx(32.5));
    CHECK(c.engine_ttft_ms.mean == Approx(20.0));
    CHECK(c.device_first_ms.mean == Approx(15.0));
    CHECK(c.device_ms.mean == Approx(50.0));
    // client e2e - engine e2e: (100 - 80) and (200 - 140) ms.
    CHECK(c.overhead_ms.mean == Approx(40.0));
    // (engine e2e - device) / steps: (80 - 40) / 4 and (140 - 60) / 4 ms.
    CHECK(c.host_step_ms.mean == Approx(15.0));
    CHECK(c.device_step_ms.mean == Approx(12.5));
    // Jobs as the host saw them: 60 / 4 and 100 / 4 ms; outside them (80 - 60) / 4 and (140 - 100) / 4 ms.
    CHECK(c.job_wall_step_ms.mean == Approx(20.0));
    CHECK(c.outside_step_ms.mean == Approx(7.5));
    const auto table = clocks_table(c, "a");
    CHECK(table.find("2 joined, 1 unjoined") != std::string::npos);
    CHECK(table.find("host per step") != std::string::npos);
    CHECK(clocks_json(c).at("unjoined").to_number<std::int64_t>() == 1);
}

TEST_CASE("bench sweep specs parse per axis and bad ones give a clear error", "[bench][sweep]") {
    auto c = parse_sweep("concurrency=1,2,4,8,16");
    REQUIRE(c.ok());
    CHECK(c->axis == sweep_axis::concurrency);
    CHECK(c->values == std::vector<double>{1, 2, 4, 8, 16});
    auto p = parse_sweep("prompt-tokens=16,1K,2k");
    REQUIRE(p.ok());
    CHECK(p->values == std::vector<double>{16, 1024, 2048});
    auto r = parse_sweep("rate=0.5,2");
    REQUIRE(r.ok());
    CHECK(r->values == std::vector<double>{0.5, 2});
    REQUIRE(parse_sweep("output-tokens=1,32,128,512").ok());

    auto message = [](std::string_view spec) {
        auto s = parse_sweep(spec);
        REQUIRE_FALSE(s.ok());
        return s.error().message;
    };
    CHECK_THAT(message("concurrency"), Catch::Contains("AXIS=V1,V2"));
    CHECK_THAT(message("threads=1,2"), Catch::Contains("unknown axis 'threads'"));
    CHECK_THAT(message("concurrency=1,,2"), Catch::Contains("'' is not an integer"));
    CHECK_THAT(message("concurrency=0"), Catch::Contains("'0' is not an integer 1..4096"));
    CHECK_THAT(message("concurrency=1.5"), Catch::Contains("'1.5'"));
    CHECK_THAT(message("prompt-tokens=12x"), Catch::Contains("token count"));
    CHECK_THAT(message("rate=-1"), Catch::Contains("requests/s"));
    CHECK_THAT(message("rate=0"), Catch::Contains("requests/s"));
    CHECK_THAT(message("concurrency=2,2"), Catch::Contains("given twice"));
    CHECK_THAT(message("prompt-tokens=1K,1024"), Catch::Contains("given twice"));
    CHECK_THAT(message("concurrency="), Catch::Contains("''"));
}

TEST_CASE("bench sweep cells: names, options per axis, context skipping and the table", "[bench][sweep]") {
    CHECK(cell_name(sweep_axis::concurrency, 4) == "concurrency-4");
    CHECK(cell_name(sweep_axis::prompt_tokens, 1024) == "prompt-tokens-1024");
    CHECK(cell_name(sweep_axis::rate, 0.5) == "rate-0.5");
    run_options base;
    base.arrival = arrival_kind::closed;
    base.concurrency = 3;
    const auto conc = cell_options(base, sweep_axis::concurrency, 8, arrival_kind::poisson);
    CHECK(conc.arrival == arrival_kind::closed);
    CHECK(conc.concurrency == 8);
    const auto rate = cell_options(base, sweep_axis::rate, 2.5, arrival_kind::constant);
    CHECK(rate.arrival == arrival_kind::constant);
    CHECK(rate.rate == 2.5);
    CHECK(cell_options(base, sweep_axis::prompt_tokens, 256, arrival_kind::poisson).prompt_tokens == 256);
    CHECK(cell_options(base, sweep_axis::output_tokens, 32, arrival_kind::poisson).output_tokens == 32);
    CHECK(cell_options(base, sweep_axis::output_tokens, 32, arrival_kind::poisson).concurrency == 3);

    CHECK(fits_context(4064, 32, 4096));
    CHECK_FALSE(fits_context(4096, 32, 4096));
    CHECK(fits_context(40960, 512, 0));  // unknown context: the server decides

    const sweep_spec spec{sweep_axis::concurrency, {1, 2}};
    std::vector<sweep_row> rows{{"concurrency-1", 1, "a", {}}, {"concurrency-2", 2, "a", {}}};
    rows[1].summary.succeeded = 30;
    const std::vector<std::string> skipped{"prompt-tokens-40960: too long"};
    const auto table = sweep_table(spec, rows, skipped);
    CHECK(table.find("concurrency-2") != std::string::npos);
    CHECK(table.find("skipped: prompt-tokens-40960") != std::string::npos);
    const auto j = sweep_json(spec, rows, skipped);
    CHECK(j.at("axis").as_string() == "concurrency");
    CHECK(j.at("cells").as_array().size() == 2);
    CHECK(j.at("skipped").as_array().size() == 1);
}

TEST_CASE("bench prompt cutter: exact token counts for every bucket, distinct windows of the text", "[bench][prompts]") {
    // A corpus shorter than the larger buckets: windows wrap around the text.
    std::vector<std::int64_t> corpus(3000);
    for (std::size_t i = 0; i < corpus.size(); ++i) corpus[i] = static_cast<std::int64_t>(i) + 100;
    for (const auto bucket : prompt_buckets()) {
        const auto prompts = cut_prompts(corpus, bucket, 8, 7);
        REQUIRE(prompts.size() == 8);
        std::set<std::int64_t> starts;
        for (const auto& p : prompts) {
            REQUIRE(static_cast<std::int64_t>(p.size()) == bucket);
            // A contiguous (wrapping) window of the corpus, so real text in order.
            bool contiguous = true;
            for (std::size_t k = 1; k < p.size(); ++k) contiguous = contiguous && p[k] == (p[k - 1] - 100 + 1) % 3000 + 100;
            REQUIRE(contiguous);
            starts.insert(p.front());
        }
        CHECK(starts.size() > 1);  // consecutive prompts differ (no prefix-cache flattery)
    }
    CHECK(cut_prompts({}, 16, 4, 1).empty());
    CHECK(cut_prompts(corpus, 0, 4, 1).empty());
    // Bucket planning against a 4096-token context with 32 output tokens.
    std::vector<std::int64_t> fit;
    for (const auto bucket : prompt_buckets())
        if (fits_context(bucket, 32, 4096)) fit.push_back(bucket);
    CHECK(fit == std::vector<std::int64_t>{1, 16, 256, 1024, 2048});
}
