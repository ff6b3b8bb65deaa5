// End-to-end trace recording: a real daemon records its run (serve --trace, or
// trace.start/trace.stop over the control socket on a recordable daemon) while
// concurrent clients stream, disconnect and hit deadlines and an operator arms
// faults and drains; `calserve replay` must rebuild the same message stream, and
// a trace with one message changed must be reported diverging at that message.
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <sys/wait.h>
#include <thread>

#include "io/trace.hpp"
#include "tests/e2e/daemon.hpp"
#include "tests/e2e/e2e_support.hpp"
#include "tests/net/net_fixture.hpp"
#include "tests/support/model_support.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;
using namespace calserve::test;

namespace {

// A streaming request that either reads to the end or hangs up after the headers; returns the HTTP status.
unsigned stream_request(std::uint16_t port, const std::string& body, bool hang_up) {
    asio::io_context ioc;
    auto s = connect(ioc, port);
    http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    http::write(s, req);
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(1 << 24);
    beast::error_code ec;
    if (hang_up) {
        http::read_header(s, buf, parser, ec);
        s.close();
        return parser.get().result_int();
    }
    http::read(s, buf, parser, ec);
    return parser.get().result_int();
}

// A mixed load: greedy and seeded/unseeded sampled streams, disconnects, short deadlines.
// Returns how many requests were refused before reaching the engine (503 while a reset runs).
int mixed_load(std::uint16_t port, int clients, int salt) {
    std::atomic<int> refused{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < clients; ++i) {
        threads.emplace_back([=, &refused] {
            auto prompt = random_prompt(std::uint64_t(salt * 100 + i), 3 + i % 11);
            json::object o{{"model", "m"}, {"prompt", to_json(prompt)}, {"max_tokens", 12 + (i * 7) % 40},
                           {"stream", true}, {"ignore_eos", true}};
            if (i % 4 == 1) o["temperature"] = 0;
            if (i % 4 == 2) o["seed"] = 1000 + i;  // sampled, seeded; the others sampled from the sequence-derived seed
            if (i % 5 == 3) o["timeout_ms"] = 8;  // deadline mid-stream
            if (i % 6 == 4) o["stop"] = json::array{"a", "e"};
            if (stream_request(port, json::serialize(o), i % 3 == 0) == 503) ++refused;
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
    for (auto& t : threads) t.join();
    return refused.load();
}

// Rewrites one message line (the middle one) with another type; returns its sequence number.
std::uint64_t mutate_middle_message(const std::string& from, const std::string& to) {
    std::ifstream in(from);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    std::vector<std::size_t> msgs;
    for (std::size_t i = 0; i < lines.size(); ++i)
        if (lines[i].find("\"k\":\"msg\"") != std::string::npos) msgs.push_back(i);
    REQUIRE(msgs.size() > 10);
    auto& line = lines[msgs[msgs.size() / 2]];
    auto obj = json::parse(line).as_object();
    obj["type"] = "mutated_type";
    line = json::serialize(obj);
    std::ofstream out(to);
    for (auto& l : lines) out << l << "\n";
    return obj.at("seq").to_number<std::uint64_t>();
}

}  // namespace

TEST_CASE("serve --trace records a faulted concurrent run that replays identically", "[e2e][trace]") {
    auto sock = socket_path("trace-e2e");
    auto trace = (scratch_dir("trace-e2e") / "daemon.jsonl").string();
    auto args = serve_args("tiny-dense-1chip", {"device.sim.step_ms=2", "device.sim.d2h_ms=1", "runtime.max_running=6"});
    for (const char* a : {"--trace", trace.c_str(), "--control-socket", sock.c_str()}) args.emplace_back(a);
    daemon_process d(args);
    REQUIRE(d.started());
    CHECK_THAT(d.banner(), Catch::Contains("recordable"));

    std::atomic<int> refused{0};
    std::thread load([&] { refused += mixed_load(d.port(), 14, 1); });
    REQUIRE(wait_until([&] { return ctl_result(sock, "stats").at("in_flight").to_number<int>() > 0; }));
    ctl_result(sock, "fault arm ccu_exception --count 1");
    ctl_result(sock, "fault arm submit_busy --count 2");
    load.join();
    ctl_result(sock, "fault clear");
    ctl_result(sock, "drain");
    ctl_result(sock, "resume");
    refused += mixed_load(d.port(), 4, 2);
    REQUIRE(d.stop() == 0);

    auto file = io::read_trace(trace);
    REQUIRE(file.ok());
    CHECK(file->header.source == "daemon");
    CHECK(file->header.from_start);
    REQUIRE(file->end.has_value());
    CHECK(file->end->dropped == 0);
    std::map<std::size_t, int> kinds;  // trace_input alternative -> count
    for (const auto& in : file->inputs) ++kinds[in.index()];
    CHECK(kinds[0] + std::size_t(refused.load()) == 18);  // every request that reached the engine
    CHECK(kinds[1] >= 1);   // disconnects became cancels
    CHECK(kinds[2] == 2);   // arms
    CHECK(kinds[3] == 1);   // clear
    CHECK(kinds[4] >= 3);   // drain, resume, and the SIGTERM drain
    CHECK(file->messages.size() == file->end->messages);
    CHECK_FALSE(file->fires.empty());  // the armed faults fired, and the trace says when

    auto [out, rc] = run_calserve("replay " + trace);
    INFO(out);
    CHECK(rc == 0);
    CHECK_THAT(out, Catch::Contains("identical (" + std::to_string(file->messages.size()) + " messages, " +
                                    std::to_string(file->fires.size()) + " fault firings)"));

    auto mutated = (scratch_dir("trace-e2e") / "mutated.jsonl").string();
    auto seq = mutate_middle_message(trace, mutated);
    auto [bad, bad_rc] = run_calserve("replay " + mutated);
    INFO(bad);
    CHECK(bad_rc == 1);
    CHECK_THAT(bad, Catch::Contains("diverged at sequence " + std::to_string(seq) + " "));
    CHECK_THAT(bad, Catch::Contains("mutated_type"));
}

TEST_CASE("trace.start and trace.stop record a window of a running daemon that replays identically", "[e2e][trace]") {
    auto sock = socket_path("trace-window");
    auto trace = (scratch_dir("trace-window") / "window.jsonl").string();
    std::filesystem::remove(trace);
    auto args = serve_args("tiny-dense-1chip", {"device.sim.step_ms=2", "runtime.recordable=true"});
    for (const char* a : {"--control-socket", sock.c_str()}) args.emplace_back(a);
    daemon_process d(args);
    REQUIRE(d.started());
    mixed_load(d.port(), 5, 3);  // before the window: moves the sequence counter that unseeded sampling derives from

    // Work in flight: the window cannot start (a fresh engine could not take the run from there).
    std::thread busy([&] { stream_request(d.port(), completion_body(random_prompt(7, 5), 200, true), false); });
    REQUIRE(wait_until([&] { return ctl_result(sock, "stats").at("in_flight").to_number<int>() > 0; }));
    auto [refused, refused_rc] = ctl(sock, "trace start " + trace);
    CHECK(refused_rc != 0);
    CHECK_THAT(refused, Catch::Contains("idle"));
    busy.join();
    REQUIRE(wait_until([&] { return ctl_result(sock, "stats").at("in_flight").to_number<int>() == 0; }));

    // An armed fault would not be armed in the fresh engine a replay starts from.
    ctl_result(sock, "fault arm submit_busy --count 1");
    auto [armed, armed_rc] = ctl(sock, "trace start " + trace);
    CHECK(armed_rc != 0);
    CHECK_THAT(armed, Catch::Contains("armed faults"));
    ctl_result(sock, "fault clear");

    ctl_result(sock, "trace start " + trace);
    auto [twice, twice_rc] = ctl(sock, "trace start " + trace + ".again");
    CHECK(twice_rc != 0);
    CHECK_THAT(twice, Catch::Contains("already"));
    REQUIRE(mixed_load(d.port(), 8, 4) == 0);
    auto stopped = ctl_result(sock, "trace stop");
    CHECK_THAT(std::string(stopped.at("written").as_string()), Catch::Contains("0 dropped"));
    mixed_load(d.port(), 2, 5);  // after the window: not recorded
    REQUIRE(d.stop() == 0);

    auto file = io::read_trace(trace);
    REQUIRE(file.ok());
    CHECK_FALSE(file->header.from_start);
    CHECK(file->header.engine_seq >= 6);
    std::size_t submits = 0;
    for (const auto& in : file->inputs) submits += std::holds_alternative<io::trace_submit>(in);
    CHECK(submits == 8);
    auto [out, rc] = run_calserve("replay " + trace);
    INFO(out);
    CHECK(rc == 0);
    CHECK_THAT(out, Catch::Contains("identical (" + std::to_string(file->messages.size()) + " messages, "));
}

TEST_CASE("a threaded daemon refuses trace.start and says how to make it recordable", "[e2e][trace]") {
    auto sock = socket_path("trace-threaded");
    auto args = serve_args("tiny-dense-1chip");
    for (const char* a : {"--control-socket", sock.c_str()}) args.emplace_back(a);
    daemon_process d(args);
    REQUIRE(d.started());
    CHECK_THAT(d.banner(), !Catch::Contains("recordable"));
    auto [out, rc] = ctl(sock, "trace start " + (scratch_dir("trace-threaded") / "t.jsonl").string());
    CHECK(rc != 0);
    CHECK_THAT(out, Catch::Contains("runtime.recordable"));
    REQUIRE(d.stop() == 0);
}
