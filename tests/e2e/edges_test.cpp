// End-to-end edges of the daemon's front door: running out of descriptors, the
// end of the drain (streams cut with an error event, not a bare close), a second
// SIGTERM during the drain.
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <poll.h>
#include <sstream>
#include <thread>

#include "tests/e2e/daemon.hpp"
#include "tests/e2e/e2e_support.hpp"
#include "tests/net/raw_client.hpp"
#include "tests/support/model_support.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;
using namespace calserve::test;
namespace websocket = boost::beast::websocket;

namespace {
std::string file_text(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

bool ready_is(std::uint16_t port, unsigned status) {
    auto r = raw_exchange(port, "GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    return r && r->result_int() == status;
}
}  // namespace

TEST_CASE("Out of descriptors the daemon backs off, says so, and answers again once connections close",
          "[e2e][edges]") {
    // Out of descriptors, the sanitizers' own memory-readability probe (a pipe) fails
    // and UBSan reports a bogus vptr error inside fmt, ending the daemon: Release only.
    if (std::getenv("CALSERVE_SANITIZED")) {
        WARN("skipped under sanitizers: their runtime needs descriptors of its own");
        return;
    }
    auto log = scratch_dir("edges-emfile") / "serve.log";
    // A cap above what the descriptors allow, so accept runs out of them first.
    daemon_process d(serve_args("tiny-dense-1chip", {"server.max_connections=100000", "server.header_timeout_ms=60000"}),
                     daemon_options{log.string(), 96});
    REQUIRE(d.started());
    asio::io_context ioc;
    std::vector<tcp::socket> held;
    for (int i = 0; i < 160; ++i) held.push_back(connect(ioc, d.port()));  // complete in the backlog
    REQUIRE(wait_until([&] { return file_text(log).find("backing off") != std::string::npos; }));
    for (auto& s : held) s.close();
    held.clear();
    auto health = raw_exchange(d.port(), "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    REQUIRE(health);
    CHECK(health->result_int() == 200);
    CHECK(metric(d.port(), "calserve_http_accept_backoffs_total") > 0);
    REQUIRE(wait_until([&] { return file_text(log).find("accepting connections again") != std::string::npos; }));
    REQUIRE(d.stop() == 0);
}

TEST_CASE("With the default cap under a low descriptor limit, extra connections are refused, not spun on",
          "[e2e][edges]") {
    auto log = scratch_dir("edges-cap") / "serve.log";
    daemon_process d(serve_args("tiny-dense-1chip", {"server.header_timeout_ms=60000"}), daemon_options{log.string(), 256});
    REQUIRE(d.started());
    asio::io_context ioc;
    std::vector<tcp::socket> held;
    for (int i = 0; i < 300; ++i) held.push_back(connect(ioc, d.port()));
    // The cap (176 for 256 descriptors) and its overflow (16) hold 192; the other 108
    // were accepted and closed at once (the client sees EOF), none left to spin on.
    auto closed = [&] {
        int n = 0;
        for (auto& s : held) {
            pollfd p{s.native_handle(), POLLIN, 0};
            if (::poll(&p, 1, 0) > 0) ++n;
        }
        return n;
    };
    CHECK(wait_until([&] { return closed() == 300 - 176 - int(net::k_overflow_connections); }));
    for (auto& s : held) s.close();
    held.clear();
    auto health = raw_exchange(d.port(), "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    REQUIRE(health);
    CHECK(health->result_int() == 200);
    CHECK(metric(d.port(), "calserve_http_connections_refused_total") > 0);
    CHECK(metric(d.port(), "calserve_http_accept_backoffs_total") == 0);
    REQUIRE(d.stop() == 0);
    CHECK(file_text(log).find("backing off") == std::string::npos);
}

TEST_CASE("Streams cut by the drain timeout end with an error event and a second SIGTERM is logged",
          "[e2e][edges]") {
    auto log = scratch_dir("edges-drain") / "serve.log";
    daemon_process d(serve_args("tiny-dense-1chip", {"device.sim.step_ms=20", "server.drain_timeout_ms=1500"}),
                     daemon_options{log.string()});
    REQUIRE(d.started());
    const auto port = d.port();
    // Two SSE streams far longer than the drain timeout.
    std::vector<std::optional<http::response<http::string_body>>> sse(2);
    std::vector<std::thread> clients;
    for (std::size_t i = 0; i < sse.size(); ++i) {
        clients.emplace_back([&, i] {
            const auto body = completion_body(random_prompt(int(i) + 1, 5), 2000, true);
            sse[i] = raw_exchange(port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                        "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
        });
    }
    // Two WebSocket streams on one socket.
    asio::io_context ioc;
    websocket::stream<tcp::socket> ws(connect(ioc, port));
    ws.handshake("127.0.0.1", "/v1/ws");
    for (const char* id : {"w1", "w2"}) {
        json::object msg{{"type", "generate"}, {"id", id}, {"prompt", to_json(random_prompt(7, 5))},
                         {"max_tokens", 2000}, {"ignore_eos", true}};
        ws.write(asio::buffer(json::serialize(msg)));
    }
    REQUIRE(wait_until([&] {
        return metric(port, "calserve_requests_running") + metric(port, "calserve_requests_waiting") == 4;
    }));

    d.signal(SIGTERM);
    REQUIRE(wait_until([&] { return ready_is(port, 503); }));  // the first one is being handled: draining
    d.signal(SIGTERM);

    std::map<std::string, json::object> ws_end;
    while (ws_end.size() < 2) {
        beast::flat_buffer buf;
        beast::error_code ec;
        ws.read(buf, ec);
        REQUIRE_FALSE(ec);
        auto ev = json::parse(beast::buffers_to_string(buf.data())).as_object();
        if (ev.at("type") == "error" || ev.at("type") == "done") ws_end[std::string(ev.at("id").as_string())] = ev;
    }
    for (auto& [id, ev] : ws_end) {
        INFO(id);
        CHECK(ev.at("type") == "error");
        CHECK(ev.at("status") == 503);
        CHECK(ev.at("error").at("message") == "server shutting down");
    }
    for (auto& c : clients) c.join();
    for (auto& r : sse) {
        REQUIRE(r);  // a complete chunked response, not a cut connection
        CHECK(r->result_int() == 200);
        auto events = sse_events(r->body());
        REQUIRE(events.has_value());
        REQUIRE(events->size() >= 2);
        CHECK(events->back() == "[DONE]");
        auto err = json::parse((*events)[events->size() - 2]).at("error").as_object();
        CHECK(err.at("message") == "server shutting down");
        CHECK(err.at("type") == "service_unavailable_error");
    }
    CHECK(d.wait_exit(60) == 0);
    CHECK(file_text(log).find("during the drain") != std::string::npos);
}
