// Browser pages and request bodies over real sockets: a foreign Origin is refused on
// HTTP and on the WebSocket upgrade, the own origin and listed ones get CORS answers
// and preflights, a body declared other than JSON is a 415 (net/origin_policy.hpp).
#include <catch2/catch.hpp>

#include "tests/net/raw_client.hpp"

using namespace calserve;
using namespace calserve::test;

namespace {
const std::string k_body = R"({"prompt":"hi","max_tokens":2})";

std::string origin_of_port(std::uint16_t port) { return "http://localhost:" + std::to_string(port); }

// An upgrade request to /v1/ws carrying `origin`; returns the status line's code.
unsigned ws_upgrade_status(std::uint16_t port, const std::string& origin) {
    auto res = raw_exchange(port, "GET /v1/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nOrigin: " +
                                      origin + "\r\n\r\n");
    return res ? res->result_int() : 0;
}

std::string raw_post(const std::string& content_type_line, const std::string& extra = {}) {
    return "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + content_type_line + extra +
           "Content-Length: " + std::to_string(k_body.size()) + "\r\n\r\n" + k_body;
}
}  // namespace

TEST_CASE("A foreign Origin is refused with a JSON 403 on HTTP and on the WebSocket upgrade; nothing runs", "[net]") {
    server_fixture f;
    auto res = post(f.port, "/v1/completions", k_body, {{"Origin", "http://evil.example"}});
    CHECK(res.result_int() == 403);
    auto err = json::parse(res.body()).at("error").as_object();
    CHECK(err.at("param").as_string() == "Origin");
    CHECK(res.find("Access-Control-Allow-Origin") == res.end());
    CHECK(call(f.port, http::verb::get, "/v1/models", {}, {{"Origin", "null"}}).result_int() == 403);
    CHECK(ws_upgrade_status(f.port, "http://evil.example") == 403);
    CHECK(call(f.port, http::verb::options, "/v1/completions", {},
               {{"Origin", "http://evil.example"}, {"Access-Control-Request-Method", "POST"}})
              .result_int() == 403);
    CHECK(f.engine.submitted().empty());
}

TEST_CASE("The own origin (and its loopback forms) is served, with CORS headers; the WebSocket upgrades", "[net]") {
    server_fixture f;
    for (const std::string host : {"localhost", "127.0.0.1", "[::1]"}) {
        const std::string origin = "http://" + host + ":" + std::to_string(f.port);
        INFO(origin);
        auto res = post(f.port, "/v1/completions", k_body, {{"Origin", origin}});
        CHECK(res.result_int() == 200);
        CHECK(std::string_view(res[http::field::access_control_allow_origin]) == origin);
        CHECK(ws_upgrade_status(f.port, origin) == 101);
    }
    // A request without Origin (curl, SDKs) is untouched and gets no CORS headers.
    auto plain = post(f.port, "/v1/completions", k_body);
    CHECK(plain.result_int() == 200);
    CHECK(plain.find("Access-Control-Allow-Origin") == plain.end());
    // Another port on localhost is another origin.
    CHECK(post(f.port, "/v1/completions", k_body, {{"Origin", "http://localhost:1"}}).result_int() == 403);
}

TEST_CASE("server.allowed_origins: a listed origin gets preflights and CORS answers, streams included", "[net]") {
    net::server_options o;
    o.allowed_origins = "http://ui.example:3000";
    server_fixture f(o);
    auto pre = call(f.port, http::verb::options, "/v1/chat/completions", {},
                    {{"Origin", "http://ui.example:3000"},
                     {"Access-Control-Request-Method", "POST"},
                     {"Access-Control-Request-Headers", "authorization, content-type, x-stainless-os"}});
    CHECK(pre.result_int() == 204);
    CHECK(std::string_view(pre[http::field::access_control_allow_origin]) == "http://ui.example:3000");
    CHECK(std::string_view(pre[http::field::access_control_allow_headers]) == "authorization, content-type, x-stainless-os");
    CHECK(std::string_view(pre[http::field::access_control_allow_methods]).find("POST") != std::string_view::npos);
    auto stream = post(f.port, "/v1/completions", R"({"prompt":"hi","max_tokens":2,"stream":true})",
                       {{"Origin", "http://ui.example:3000"}});
    CHECK(stream.result_int() == 200);
    CHECK(std::string_view(stream[http::field::access_control_allow_origin]) == "http://ui.example:3000");
    CHECK(std::string_view(stream[http::field::vary]) == "Origin");
    CHECK(ws_upgrade_status(f.port, "http://ui.example:3000") == 101);
    CHECK(ws_upgrade_status(f.port, "http://ui.example:3001") == 403);
    // OPTIONS without an Origin says what the route takes.
    auto bare = call(f.port, http::verb::options, "/v1/completions");
    CHECK(bare.result_int() == 204);
    CHECK(bare.find("Access-Control-Allow-Origin") == bare.end());
}

TEST_CASE("A POST body declared other than JSON is a 415; undeclared and curl's form type are read", "[net]") {
    server_fixture f;
    struct row {
        std::string content_type_line;
        std::string extra;
        unsigned status;
    };
    const std::string own = "Origin: " + origin_of_port(f.port) + "\r\n";
    const row table[] = {
        {"Content-Type: application/json\r\n", "", 200},
        {"Content-Type: application/json; charset=utf-8\r\n", own, 200},
        {"", "", 200},                                                          // no header
        {"Content-Type: application/x-www-form-urlencoded\r\n", "", 200},       // curl -d without -H
        {"Content-Type: application/x-www-form-urlencoded\r\n", own, 415},      // a browser form
        {"Content-Type: text/plain\r\n", "", 415},
        {"Content-Type: text/plain;charset=UTF-8\r\n", own, 415},
        {"Content-Type: multipart/form-data; boundary=x\r\n", "", 415},
    };
    for (const auto& r : table) {
        INFO(r.content_type_line << r.extra);
        auto res = raw_exchange(f.port, raw_post(r.content_type_line, r.extra));
        REQUIRE(res);
        CHECK(res->result_int() == r.status);
        if (r.status == 415) CHECK(json::parse(res->body()).at("error").at("param").as_string() == "Content-Type");
    }
    CHECK(f.engine.submitted().size() == 4);
}
