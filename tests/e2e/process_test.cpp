// End-to-end process behaviour of `calserve serve`: signals and a dead device.
//  - SIGHUP during streaming is logged and ignored: the streams complete, the
//    daemon keeps serving, SIGTERM still drains it to exit 0 and removes the
//    control socket (it used to die with 129 and leave the socket behind).
//  - SIGPIPE is ignored: a daemon whose stderr reader went away keeps serving
//    after its next log line (it used to die with 141).
//  - A dead device: with device.dead_exit the daemon exits 3 for a supervisor to
//    restart it; without, `fault clear` + `ctl device reset` bring it back.
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <future>
#include <unistd.h>

#include "tests/e2e/daemon.hpp"
#include "tests/e2e/e2e_support.hpp"
#include "tests/net/net_fixture.hpp"
#include "tests/support/model_support.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;
using namespace calserve::test;

namespace {

const std::string k_preset = "tiny-dense-1chip";

std::string expected_text(std::uint16_t port, const std::vector<std::int32_t>& prompt, int n) {
    return reference_text(port, reference_greedy(package_model_dir(test_package_dir(k_preset)), prompt, n));
}

int health(std::uint16_t port) { return int(call(port, http::verb::get, "/health").result_int()); }

}  // namespace

TEST_CASE("SIGHUP during streaming: streams complete, the daemon keeps serving, SIGTERM exits 0", "[e2e][signals]") {
    auto sock = socket_path("sighup");
    // A paced device (10 ms per step) so the streams are running when the signal arrives.
    daemon_process d(serve_args(k_preset, {"device.sim.step_ms=10", "server.control_socket=" + sock.string()}));
    REQUIRE(d.started());
    REQUIRE(std::filesystem::exists(sock));

    constexpr int k_streams = 4;
    const int n = 48;
    std::vector<std::vector<std::int32_t>> prompts;
    std::vector<std::future<std::string>> streams;
    for (int i = 0; i < k_streams; ++i) {
        prompts.push_back(random_prompt(40 + i, 9 + i));
        streams.push_back(std::async(std::launch::async, [&, i] { return sse_text(d.port(), prompts[std::size_t(i)], n); }));
    }
    REQUIRE(wait_until([&] { return ctl_result(sock, "stats").at("in_flight").to_number<int>() == k_streams; }));
    d.signal(SIGHUP);
    d.signal(SIGHUP);  // and again: the handler re-arms
    for (int i = 0; i < k_streams; ++i) {
        INFO("stream " << i);
        CHECK(streams[std::size_t(i)].get() == expected_text(d.port(), prompts[std::size_t(i)], n));
    }
    CHECK(d.wait_exit(0) == -1);  // still running
    CHECK(health(d.port()) == 200);
    auto after = random_prompt(50, 7);
    CHECK(sse_text(d.port(), after, 5) == expected_text(d.port(), after, 5));
    REQUIRE(d.stop(SIGTERM) == 0);
    CHECK_FALSE(std::filesystem::exists(sock));
}

TEST_CASE("SIGPIPE: a daemon whose stderr reader went away keeps serving", "[e2e][signals]") {
    auto sock = socket_path("sigpipe");
    daemon_options opts;
    opts.stderr_pipe = true;
    daemon_process d(serve_args(k_preset, {"device.sim.step_ms=0", "server.control_socket=" + sock.string()}), opts);
    REQUIRE(d.started());
    d.close_stderr();
    // Each of these logs a line (warn and info) into the pipe that has no reader now.
    ctl_result(sock, "device reset");
    REQUIRE(wait_until([&] { return call(d.port(), http::verb::get, "/ready").result_int() == 200; }));
    d.signal(SIGHUP);
    ctl_result(sock, "fault arm slow_infer --count 1 --delay-ms 1");
    auto prompt = random_prompt(61, 8);
    CHECK(sse_text(d.port(), prompt, 6) == expected_text(d.port(), prompt, 6));
    CHECK(d.wait_exit(0) == -1);
    CHECK(health(d.port()) == 200);
    REQUIRE(d.stop(SIGTERM) == 0);
    CHECK_FALSE(std::filesystem::exists(sock));
}

TEST_CASE("device.dead_exit: a dead device ends the daemon with exit code 3", "[e2e][dead]") {
    auto sock = socket_path("dead-exit");
    daemon_process d(serve_args(k_preset, {"device.sim.step_ms=0", "device.dead_exit=true", "device.reset_backoff_ms=1",
                                           "device.reset_limit=1", "server.control_socket=" + sock.string()}));
    REQUIRE(d.started());
    ctl_result(sock, "fault arm reset_fail --mode always");
    ctl_result(sock, "device reset");
    CHECK(d.wait_exit(60) == 3);
    CHECK_FALSE(std::filesystem::exists(sock));
}

TEST_CASE("dead device without dead_exit: answers 503, then fault clear + device reset bring it back", "[e2e][dead]") {
    auto sock = socket_path("dead-revive");
    daemon_process d(serve_args(k_preset, {"device.sim.step_ms=0", "device.reset_backoff_ms=1", "device.reset_limit=1",
                                           "server.control_socket=" + sock.string()}));
    REQUIRE(d.started());
    ctl_result(sock, "fault arm reset_fail --mode always");
    ctl_result(sock, "device reset");
    REQUIRE(wait_until([&] { return ctl_result(sock, "stats").at("device_state").as_string() == "dead"; }));
    CHECK(health(d.port()) == 503);
    auto prompt = random_prompt(71, 8);
    CHECK(sse_text(d.port(), prompt, 4).rfind("HTTP 503", 0) == 0);

    ctl_result(sock, "fault clear");
    ctl_result(sock, "device reset");
    REQUIRE(wait_until([&] { return call(d.port(), http::verb::get, "/ready").result_int() == 200; }));
    CHECK(health(d.port()) == 200);
    CHECK(sse_text(d.port(), prompt, 6) == expected_text(d.port(), prompt, 6));
    REQUIRE(d.stop(SIGTERM) == 0);
}
