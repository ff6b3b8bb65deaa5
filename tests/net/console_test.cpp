// The web console's routes on a fake engine: the embedded page and its files,
// the keyed state endpoint, server.console off, and the WebSocket key offered as
// a subprotocol.
#include <boost/beast/websocket.hpp>
#include <catch2/catch.hpp>

#include "metrics/metrics.hpp"
#include "net/console/console_assets.hpp"
#include "net/console/console_routes.hpp"
#include "net/console/console_state.hpp"
#include "tests/net/net_fixture.hpp"

using namespace calserve;
using namespace calserve::test;
namespace websocket = boost::beast::websocket;

namespace {
net::server_options keyed(bool console = true) {
    net::server_options o;
    o.api_key = "k3y";
    o.console = console;
    o.console_state = [](std::uint64_t since) { return R"({"since":)" + std::to_string(since) + "}"; };
    return o;
}

// A WebSocket handshake offering `protocols`; the HTTP status and the subprotocol answered.
std::pair<unsigned, std::string> ws_handshake(std::uint16_t port, const std::string& protocols) {
    asio::io_context ioc;
    websocket::stream<tcp::socket> ws(connect(ioc, port));
    websocket::response_type res;
    beast::error_code ec;
    ws.set_option(websocket::stream_base::decorator(
        [&](websocket::request_type& req) { req.set(http::field::sec_websocket_protocol, protocols); }));
    ws.handshake(res, "127.0.0.1", "/v1/ws", ec);
    return {res.result_int(), std::string(res[http::field::sec_websocket_protocol])};
}
}  // namespace

TEST_CASE("console: the page and its files are embedded and served with a strict CSP", "[console]") {
    server_fixture f(keyed());
    auto page = call(f.port, http::verb::get, "/");
    REQUIRE(page.result_int() == 200);
    CHECK(page[http::field::content_type] == "text/html; charset=utf-8");
    CHECK(page.body().find("/console/console.js") != std::string::npos);
    const std::string csp(page["Content-Security-Policy"]);
    CHECK(csp.find("script-src 'self'") != std::string::npos);
    CHECK(csp.find("default-src 'none'") != std::string::npos);
    CHECK(page["X-Content-Type-Options"] == "nosniff");
    auto js = call(f.port, http::verb::get, "/console/console.js");
    REQUIRE(js.result_int() == 200);
    CHECK(js[http::field::content_type] == "text/javascript; charset=utf-8");
    CHECK(js.body().find("textContent") != std::string::npos);
    CHECK(js.body().find("innerHTML") == std::string::npos);  // model output is never parsed as markup
    CHECK(call(f.port, http::verb::get, "/console/console.css").result_int() == 200);
    CHECK(call(f.port, http::verb::get, "/console/missing.js").result_int() == 404);
    for (const auto& a : net::console_assets()) CHECK(!a.bytes.empty());
}

TEST_CASE("console: the state endpoint needs the key and passes `since` on", "[console]") {
    server_fixture f(keyed());
    CHECK(call(f.port, http::verb::get, "/v1/console/state").result_int() == 401);
    const headers auth{{"Authorization", "Bearer k3y"}};
    auto ok = call(f.port, http::verb::get, "/v1/console/state?since=42", {}, auth);
    REQUIRE(ok.result_int() == 200);
    CHECK(ok.body() == R"({"since":42})");
    CHECK(call(f.port, http::verb::get, "/v1/console/state?since=x", {}, auth).result_int() == 400);
}

TEST_CASE("console: server.console off answers 404 on every console route", "[console]") {
    server_fixture f(keyed(false));
    const headers auth{{"Authorization", "Bearer k3y"}};
    CHECK(call(f.port, http::verb::get, "/").result_int() == 404);
    CHECK(call(f.port, http::verb::get, "/console/console.js").result_int() == 404);
    CHECK(call(f.port, http::verb::get, "/v1/console/state", {}, auth).result_int() == 404);
}

TEST_CASE("console: a WebSocket may offer the key as the calserve.key.<hex> subprotocol", "[console][ws]") {
    server_fixture f(keyed());
    CHECK(ws_handshake(f.port, "calserve").first == 401);
    CHECK(ws_handshake(f.port, "calserve, calserve.key.6b3379") == std::pair<unsigned, std::string>{101, "calserve"});
    CHECK(ws_handshake(f.port, "calserve, calserve.key.6b337a").first == 401);  // "k3z"
    CHECK(ws_handshake(f.port, "calserve, calserve.key.zz").first == 401);      // not hex
}

TEST_CASE("console: server.console auto is on for loopback hosts only", "[console]") {
    CHECK(net::console_enabled("auto", "127.0.0.1"));
    CHECK(net::console_enabled("auto", "::1"));
    CHECK(net::console_enabled("auto", "localhost"));
    CHECK_FALSE(net::console_enabled("auto", "0.0.0.0"));
    CHECK_FALSE(net::console_enabled("auto", "10.1.2.3"));
    CHECK(net::console_enabled("true", "0.0.0.0"));
    CHECK_FALSE(net::console_enabled("false", "127.0.0.1"));
}

TEST_CASE("console: percentiles interpolate within histogram buckets", "[console]") {
    const double bounds[] = {1.0, 2.0, 4.0};
    metrics::histogram h(bounds);
    CHECK(std::isnan(net::histogram_quantile(h, 0.5)));
    for (int i = 0; i < 10; ++i) h.observe(1.5);  // all in (1, 2]
    CHECK(net::histogram_quantile(h, 0.5) == Approx(1.5));
    CHECK(net::histogram_quantile(h, 1.0) == Approx(2.0));
    h.observe(100);  // overflow: reported as the last bound
    CHECK(net::histogram_quantile(h, 1.0) == Approx(4.0));
}
