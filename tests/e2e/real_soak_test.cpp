// End-to-end `calserve soak --real`: a short wall-clock soak with fault injection
// against a real daemon started with a control socket. The soak must finish with
// exit 0, account for every request it sent, take samples, and see KV and
// in-flight work back at 0; the daemon must still drain cleanly afterwards. With
// the daemon's pid it also sends SIGHUPs among its hostile clients (connection
// floods, streams never read), which the daemon must survive.
// No timing is asserted (the machine is shared).
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sys/wait.h>

#include "tests/e2e/daemon.hpp"
#include "tests/e2e/e2e_support.hpp"
#include "tests/support/model_support.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;
using namespace calserve::test;

namespace {

// The integer after `key=` on the line starting with `line_start`, or -1.
long long field(const std::string& out, const std::string& line_start, const std::string& key) {
    std::smatch m;
    const std::regex re("(^|\n)" + line_start + "[^\n]*[ :]" + key + "=([0-9]+)");
    return std::regex_search(out, m, re) ? std::stoll(m[2]) : -1;
}

}  // namespace

TEST_CASE("soak --real: a short run with faults keeps every request accounted for and KV back at 0", "[e2e]") {
    const auto sock = socket_path("real-soak");
    const auto samples = sock.parent_path() / "samples.jsonl";
    // A paced device keeps requests in flight long enough for faults to meet them, and a
    // short device wait bound keeps an injected wait_timeout from stalling the whole run.
    daemon_process d({"--package", test_package_dir("tiny-dense-1chip").string(), "--set", "log.level=error", "--set",
                      "device.sim.step_ms=5", "--set", "device.wait_timeout_ms=1000", "--control-socket",
                      sock.string()});
    REQUIRE(d.started());

    // Seed 3's plan arms a fault every 1.5 s on average (the plan is printed first).
    const std::string cmd = "soak --real --url http://127.0.0.1:" +
                            std::to_string(d.port()) + " --control-socket " + sock.string() +
                            " --duration 8s --concurrency 4 --seed 3 --sample-interval 500ms --warmup 25% --out " +
                            samples.string() + " --daemon-pid " + std::to_string(d.pid());
    auto [out, rc] = run_calserve(cmd);
    INFO(out);
    CHECK(rc == 0);
    CHECK(out.find("verdict: ok") != std::string::npos);

    const auto sent = field(out, "requests:", "sent");
    CHECK(sent > 0);
    CHECK(out.find("(accounted " + std::to_string(sent) + ")") != std::string::npos);
    CHECK(field(out, "requests:", "unexpected") == 0);
    CHECK(field(out, "requests:", "completed") > 0);
    CHECK(field(out, "faults:", "armed") >= 1);
    // Hostile clients: floods, unread streams and SIGHUPs happened; /health answered through all.
    CHECK(field(out, "hostile:", "floods") + field(out, "hostile:", "never_read") + field(out, "hostile:", "hups") >= 1);
    CHECK(field(out, "hostile:", "health_misses") == 0);
    CHECK(field(out, "settle:", "kv_blocks_used") == 0);
    CHECK(field(out, "settle:", "inflight_slots") == 0);
    CHECK(field(out, "settle:", "requests_running") == 0);

    std::ifstream in(samples);
    std::string line;
    int lines = 0;
    while (std::getline(in, line)) {
        if (line.find("\"rss_bytes\"") != std::string::npos && line.find("\"open_fds\"") != std::string::npos) ++lines;
    }
    CHECK(lines >= 2);
    CHECK(out.find("rss: first=") != std::string::npos);
    CHECK(out.find("fds: first=") != std::string::npos);
    CHECK(out.find("threads: first=") != std::string::npos);

    REQUIRE(d.stop() == 0);  // still healthy: drains and exits 0
}
