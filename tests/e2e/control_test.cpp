// End-to-end control socket: a real daemon with --control-socket, driven by the
// `calserve ctl` client while greedy streams run. A device fault injected mid-
// stream must be invisible in the stream's text (the sequence is re-prefilled
// after the reset) and visible in the metrics and the fault list.
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <future>
#include <random>

#include "tests/e2e/daemon.hpp"
#include "tests/e2e/e2e_support.hpp"
#include "tests/net/net_fixture.hpp"
#include "tests/support/model_support.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;
using namespace calserve::test;
namespace json = boost::json;


TEST_CASE("ctl: ccu_exception mid-stream is recovered, listed and counted, reset and drain", "[e2e]") {
    auto sock = socket_path("control-socket");
    const std::string preset = "tiny-dense-1chip";
    // A paced device (fixed 10 ms per step) so the stream is still running when the fault is armed.
    daemon_process d({"--package", test_package_dir(preset).string(), "--served-model-name", "m", "--set",
                      "log.level=warn", "--set", "device.sim.step_ms=10", "--control-socket", sock.string()});
    REQUIRE(d.started());
    REQUIRE(std::filesystem::exists(sock));

    auto prompt = random_prompt(21, 13);
    const int n = 64;
    auto expected = reference_text(d.port(), reference_greedy(package_model_dir(test_package_dir(preset)), prompt, n));

    // Armed on the decode submodel before the stream starts, so it fires mid-stream (after the
    // prefill, on the first decode step) however slowly this machine spawns `ctl`.
    auto armed = ctl_result(sock, "fault arm ccu_exception --count 1 --submodel tiny_dense_decode_b1_c4096");
    CHECK(armed.at("arm_id").to_number<int>() >= 1);
    CHECK(sse_text(d.port(), prompt, n) == expected);

    CHECK(metric(d.port(), "calserve_device_resets_total") == 1);
    CHECK(metric(d.port(), "calserve_faults_total{point=\"ccu_exception\"}") == 1);
    auto listed = ctl_result(sock, "fault list").at("faults").as_array();
    REQUIRE(listed.size() == 1);
    CHECK(listed.at(0).at("point").as_string() == "ccu_exception");
    CHECK(listed.at(0).at("fires").to_number<int>() == 1);
    auto stats = ctl_result(sock, "stats");
    CHECK(stats.at("fault_fires").at("ccu_exception").to_number<int>() == 1);
    CHECK(stats.at("device_resets").to_number<int>() == 1);

    // An operator reset: the device goes through reset + warm-up and serves again.
    ctl_result(sock, "device reset");
    REQUIRE(wait_until([&] { return metric(d.port(), "calserve_device_resets_total") == 2; }));
    REQUIRE(wait_until([&] { return call(d.port(), http::verb::get, "/ready").result_int() == 200; }));
    CHECK(sse_text(d.port(), prompt, 6) == reference_text(d.port(), reference_greedy(package_model_dir(test_package_dir(preset)), prompt, 6)));

    // Unknown points are refused with a structured error and a non-zero exit.
    auto [bad, rc] = ctl(sock, "fault arm no_such_point");
    CHECK(rc != 0);
    CHECK(bad.find("invalid_argument") != std::string::npos);

    ctl_result(sock, "drain");
    CHECK(call(d.port(), http::verb::get, "/ready").result_int() == 503);
    ctl_result(sock, "resume");
    CHECK(call(d.port(), http::verb::get, "/ready").result_int() == 200);
    REQUIRE(d.stop() == 0);
    CHECK_FALSE(std::filesystem::exists(sock));
}

TEST_CASE("ctl: client_stall fires in the daemon: a slow consumer delays its stream, a vanished one is cut", "[e2e][faults]") {
    auto sock = socket_path("client-stall");
    const std::string preset = "tiny-dense-1chip";
    daemon_process d({"--package", test_package_dir(preset).string(), "--served-model-name", "m", "--set",
                      "log.level=warn", "--set", "device.sim.step_ms=5", "--control-socket", sock.string()});
    REQUIRE(d.started());
    auto prompt = random_prompt(31, 11);
    const int n = 24;
    auto expected = reference_text(d.port(), reference_greedy(package_model_dir(test_package_dir(preset)), prompt, n));

    // Slow consumer: three writes each wait 20 ms first; the stream is intact.
    ctl_result(sock, "fault arm client_stall --count 3 --delay-ms 20");
    CHECK(sse_text(d.port(), prompt, n) == expected);
    CHECK(metric(d.port(), "calserve_faults_total{point=\"client_stall\"}") == 3);
    auto listed = ctl_result(sock, "fault list").at("faults").as_array();
    REQUIRE(listed.size() == 1);
    CHECK(listed.at(0).at("fires").to_number<int>() == 3);
    CHECK(ctl_result(sock, "stats").at("fault_fires").at("client_stall").to_number<int>() == 3);

    // Vanished consumer (delay 0): the connection is closed and the request cancelled.
    ctl_result(sock, "fault clear");
    ctl_result(sock, "fault arm client_stall --mode once");
    auto cut = sse_text(d.port(), prompt, n);
    CHECK(cut != expected);
    CHECK(cut.rfind("cut: ", 0) == 0);
    CHECK(metric(d.port(), "calserve_faults_total{point=\"client_stall\"}") == 4);
    REQUIRE(wait_until([&] { return ctl_result(sock, "stats").at("in_flight").to_number<int>() == 0; }));
    CHECK(metric(d.port(), "calserve_requests_total{outcome=\"cancelled\"}") >= 1);
    CHECK(sse_text(d.port(), prompt, n) == expected);  // exhausted: the next stream is untouched

    // Aimed at one request (the daemon numbers requests by admission, from 1; three so far):
    // request 4 is untouched, request 5 is cut, request 6 is untouched again.
    ctl_result(sock, "fault clear");
    ctl_result(sock, "fault arm client_stall --mode always --request 5");
    CHECK(sse_text(d.port(), prompt, n) == expected);
    CHECK(sse_text(d.port(), prompt, n).rfind("cut: ", 0) == 0);
    REQUIRE(wait_until([&] { return ctl_result(sock, "stats").at("in_flight").to_number<int>() == 0; }));
    CHECK(sse_text(d.port(), prompt, n) == expected);
    CHECK(ctl_result(sock, "fault list").at("faults").as_array().at(0).at("fires").to_number<int>() == 1);
    REQUIRE(d.stop() == 0);
}

TEST_CASE("ctl: a request whose device jobs always fail gets job_retries_exhausted alone; 4 streams finish intact",
          "[e2e][faults][liveness]") {
    auto sock = socket_path("poison");
    const std::string preset = "tiny-dense-1chip";
    // Paced (10 ms a step) so the four streams are still decoding when the poison arrives.
    auto args = serve_args(preset, {"device.sim.step_ms=10", "runtime.max_job_retries=2"});
    args.insert(args.end(), {"--control-socket", sock.string()});
    daemon_process d(args);
    REQUIRE(d.started());
    const auto model_dir = package_model_dir(test_package_dir(preset));
    constexpr int k_others = 4, n = 64;
    std::vector<std::vector<std::int32_t>> prompts;
    std::vector<std::string> expected;
    for (int i = 0; i < k_others; ++i) {
        prompts.push_back(random_prompt(700 + i, 9 + i));
        expected.push_back(reference_text(d.port(), reference_greedy(model_dir, prompts.back(), n)));
    }
    // The daemon numbers a model's sequences from 1 in admission order: the four streams
    // take 1-4, the poison request 5. Its every device job faults.
    ctl_result(sock, "fault arm ccu_exception --mode always --sequence 5");
    std::vector<std::future<std::string>> streams;
    for (int i = 0; i < k_others; ++i)
        streams.push_back(std::async(std::launch::async, [&, i] { return sse_text(d.port(), prompts[std::size_t(i)], n); }));
    REQUIRE(wait_until([&] { return ctl_result(sock, "stats").at("in_flight").to_number<int>() == k_others; }));

    auto poison = post(d.port(), "/v1/completions", completion_body(random_prompt(799, 12), n, false));
    CHECK(poison.result_int() == 503);
    CHECK(poison.body().find("job_retries_exhausted") != std::string::npos);
    for (int i = 0; i < k_others; ++i) {
        INFO("stream " << i);
        CHECK(streams[std::size_t(i)].get() == expected[std::size_t(i)]);
    }
    // One failed job and two retries: three faults, three resets that took; never dead.
    CHECK(metric(d.port(), "calserve_request_retries_exhausted_total") == 1);
    CHECK(metric(d.port(), "calserve_faults_total{point=\"ccu_exception\"}") == 3);
    CHECK(metric(d.port(), "calserve_device_resets_total") == 3);
    CHECK(call(d.port(), http::verb::get, "/health").result_int() == 200);
    auto stats = ctl_result(sock, "stats");
    CHECK(stats.at("device_state").as_string() == "ready");
    CHECK(stats.at("in_flight").to_number<int>() == 0);
    REQUIRE(d.stop() == 0);
}
