// End to end: a tiny `calserve bench --sweep ... --server-log` against a real
// `calserve serve` writing its timing log. Checks the sweep layout (one
// subdirectory per cell plus the sweep table), that every client record joined
// its server line by request id, and that the device clock is there (device_s > 0,
// one device step per generated token). No timing assertions.
#include <sys/wait.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tests/e2e/daemon.hpp"
#include "tests/support/model_support.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve::test;
namespace json = boost::json;

namespace {

std::string slurp(const std::filesystem::path& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

int bench(const std::string& args, const std::filesystem::path& log) {
    const std::string cmd = calserve_binary().string() + " bench " + args + " >" + log.string() + " 2>&1";
    const int st = std::system(cmd.c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace

TEST_CASE("bench sweep with --server-log: every record joined, device time reported", "[e2e][bench]") {
    const auto dir = scratch_dir("bench-sweep");
    const auto timing = dir / "timing.jsonl";
    daemon_process d({"--package", test_package_dir("tiny-dense-1chip").string(), "--set", "log.level=warn", "--set",
                      "server.timing_log=" + timing.string()});
    REQUIRE(d.started());
    const auto out = dir / "out";
    const std::string url = "http://127.0.0.1:" + std::to_string(d.port());
    const int rc = bench("--url " + url + " --sweep concurrency=1,2 --requests 4 --warmup 1 --prompt-tokens 16 " +
                             "--output-tokens 3 --seed 3 --server-log " + timing.string() + " --out " + out.string(),
                         dir / "bench.log");
    INFO(slurp(dir / "bench.log"));
    REQUIRE(rc == 0);

    for (const char* cell : {"concurrency-1", "concurrency-2"}) {
        std::ifstream jl(out / cell / "requests.jsonl");
        std::string line;
        int records = 0;
        while (std::getline(jl, line)) {
            const auto r = json::parse(line).as_object();
            ++records;
            REQUIRE(r.at("ok").as_bool());
            CHECK(r.at("server_prompt_tokens").as_int64() == 16);
            REQUIRE(r.at("server_joined").as_bool());
            CHECK(r.at("device_s").as_double() > 0.0);
            CHECK(r.at("device_first_s").as_double() > 0.0);
            CHECK(r.at("device_wall_s").as_double() > 0.0);
            CHECK(r.at("device_steps").as_int64() == r.at("completion_tokens").as_int64());
            CHECK(r.at("server_engine_e2e_s").as_double() > 0.0);
        }
        CHECK(records == 5);
        const auto sum = json::parse(slurp(out / cell / "summary.json")).as_object().at("a").as_object();
        const auto& clocks = sum.at("clocks").as_object();
        CHECK(clocks.at("joined").to_number<std::int64_t>() == 4);
        CHECK(clocks.at("unjoined").to_number<std::int64_t>() == 0);
        CHECK(clocks.at("no_id").to_number<std::int64_t>() == 0);
        CHECK(clocks.at("has_device").as_bool());
        CHECK(clocks.at("device_ms").as_object().at("count").to_number<std::int64_t>() == 4);
        CHECK(slurp(out / cell / "summary.txt").find("4 joined, 0 unjoined") != std::string::npos);
    }
    const auto sweep = json::parse(slurp(out / "sweep.json")).as_object();
    CHECK(sweep.at("axis").as_string() == "concurrency");
    REQUIRE(sweep.at("cells").as_array().size() == 2);
    CHECK(sweep.at("cells").as_array()[1].as_object().at("cell").as_string() == "concurrency-2");
    CHECK(slurp(out / "sweep.txt").find("concurrency-2") != std::string::npos);

    // A prompt sweep skips buckets above the context (4096) with a note.
    const auto out2 = dir / "out2";
    REQUIRE(bench("--url " + url + " --concurrency 1 --sweep prompt-tokens=16,8K --requests 2 --warmup 0 " +
                      "--output-tokens 2 --out " + out2.string(),
                  dir / "bench2.log") == 0);
    CHECK(slurp(dir / "bench2.log").find("skipped prompt-tokens-8192") != std::string::npos);
    CHECK(std::filesystem::exists(out2 / "prompt-tokens-16" / "requests.jsonl"));
    CHECK_FALSE(std::filesystem::exists(out2 / "prompt-tokens-8192"));
    CHECK(json::parse(slurp(out2 / "sweep.json")).at("skipped").as_array().size() == 1);

    // A bad sweep spec is a usage error before any load.
    CHECK(bench("--url " + url + " --sweep threads=1,2", dir / "bench3.log") == 2);
    CHECK(slurp(dir / "bench3.log").find("unknown axis 'threads'") != std::string::npos);
    REQUIRE(d.stop() == 0);
}
