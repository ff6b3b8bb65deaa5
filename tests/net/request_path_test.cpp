// The socket-free part of the request path (net/request_path.hpp) that the fuzz
// targets drive: parser limits and refusals, routing and small-route replies, the
// response a reply becomes, body admission, and WebSocket messages through a session.
#include <catch2/catch.hpp>

#include "net/request_path.hpp"
#include "tests/net/net_fixture.hpp"

using namespace calserve;
using namespace calserve::test;

namespace {
struct path_fixture {
    explicit path_fixture(std::string key = "k") : metrics(registry) {
        net::server_options o;
        o.api_key = std::move(key);
        srv = std::make_shared<net::http_server::impl>(ioc, engine, metrics, std::move(o));
    }
    asio::io_context ioc;
    fake_engine engine;
    metrics::registry registry;
    calserve::metrics::calserve_metrics metrics;
    std::shared_ptr<net::http_server::impl> srv;
};

net::http_request request(http::verb v, std::string target, std::string body = {}, bool key = true) {
    net::http_request r{v, target, 11};
    if (key) r.set(http::field::authorization, "Bearer k");
    r.body() = std::move(body);
    r.prepare_payload();
    return r;
}

std::string code_of(const net::route_reply& r) {
    return std::string(json::parse(r.body).at("error").at("code").as_string());
}

// Feeds `bytes` to a parser with the server's limits; the error it stops on (none: a whole request).
beast::error_code parse(const net::server_options& o, std::string_view bytes) {
    http::request_parser<http::string_body> parser;
    net::limit_request_parser(parser, o);
    parser.eager(true);
    beast::error_code ec;
    while (!bytes.empty() && !ec) {
        auto n = parser.put(asio::buffer(bytes.data(), bytes.size()), ec);
        if (ec == http::error::need_more) {
            ec = {};
            if (n == 0) break;
        }
        bytes.remove_prefix(n);
        if (parser.is_done()) break;
    }
    if (!ec && !parser.is_done()) parser.put_eof(ec);
    return ec;
}
}  // namespace

TEST_CASE("parse_refusal answers 431, 413 and 400 as the session does, and nothing to a peer that left") {
    path_fixture f;
    auto& o = f.srv->options;
    const std::string big_header = "GET / HTTP/1.1\r\nHost: a\r\nX: " + std::string(net::k_header_limit_bytes, 'x') + "\r\n\r\n";
    auto too_long = net::parse_refusal(parse(o, big_header), o);
    REQUIRE(too_long);
    CHECK(net::http_status_of(*too_long) == 431);
    const std::string big_body = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: " + std::to_string(o.max_body_bytes + 1) + "\r\n\r\n";
    auto too_large = net::parse_refusal(parse(o, big_body), o);
    REQUIRE(too_large);
    CHECK(net::http_status_of(*too_large) == 413);
    auto malformed = net::parse_refusal(parse(o, "GET / HTTP/9.x\r\n\r\n"), o);
    REQUIRE(malformed);
    CHECK(net::http_status_of(*malformed) == 400);
    CHECK(malformed->code == status::parse_error);
    CHECK_FALSE(net::parse_refusal(parse(o, "GET / HTTP/1.1\r\nHost: a\r\n"), o));   // ended inside the head
    CHECK_FALSE(net::parse_refusal(asio::error::eof, o));
    CHECK_FALSE(parse(o, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
}

TEST_CASE("head_refusal wants Host in HTTP/1.1 only, and make_refusal closes with the JSON error") {
    path_fixture f;
    net::http_request no_host{http::verb::get, "/health", 11};
    auto refused = net::head_refusal(no_host);
    REQUIRE(refused);
    CHECK(net::http_status_of(*refused) == 400);
    CHECK(refused->param == "Host");
    net::http_request old{http::verb::get, "/health", 10};
    CHECK_FALSE(net::head_refusal(old));
    auto res = net::make_refusal(f.srv->options, 10, *refused, {{"X-Extra", "1"}});
    CHECK(res.version() == 10);
    CHECK(res.result_int() == 400);
    CHECK_FALSE(res.keep_alive());
    CHECK(res["X-Extra"] == "1");
    CHECK(json::parse(res.body()).at("error").at("param") == "Host");
    auto busy = net::make_refusal(f.srv->options, 11, net::api_error{status::not_ready, {}, "full"}, {});
    CHECK(busy.result_int() == 503);
    CHECK(busy[http::field::retry_after] == "1");
}

TEST_CASE("ws_refusal checks the upgrade, its key and version, then the API key") {
    path_fixture f;
    auto upgrade = [](bool key) {
        auto r = request(http::verb::get, "/v1/ws", {}, key);
        r.set(http::field::host, "a");
        r.set(http::field::connection, "Upgrade");
        r.set(http::field::upgrade, "websocket");
        r.set(http::field::sec_websocket_key, "dGhlIHNhbXBsZSBub25jZQ==");
        r.set(http::field::sec_websocket_version, "13");
        return r;
    };
    CHECK_FALSE(net::ws_refusal(*f.srv, upgrade(true)));
    auto no_key = net::ws_refusal(*f.srv, upgrade(false));
    REQUIRE(no_key);
    CHECK(net::http_status_of(no_key->first) == 401);
    auto plain = net::ws_refusal(*f.srv, request(http::verb::get, "/v1/ws"));
    REQUIRE(plain);
    CHECK(net::http_status_of(plain->first) == 426);
    auto old_version = upgrade(true);
    old_version.set(http::field::sec_websocket_version, "8");
    auto v = net::ws_refusal(*f.srv, old_version);
    REQUIRE(v);
    CHECK(net::http_status_of(v->first) == 426);
    auto bad_key = upgrade(true);
    bad_key.set(http::field::sec_websocket_key, std::string(40, 'k'));
    auto k = net::ws_refusal(*f.srv, bad_key);
    REQUIRE(k);
    CHECK(net::http_status_of(k->first) == 400);

    // Draining (or not ready): the upgrade itself is refused with 503 + Retry-After,
    // so a front retries it on another daemon.
    f.srv->draining.store(true);
    auto draining = net::ws_refusal(*f.srv, upgrade(true));
    REQUIRE(draining);
    CHECK(net::http_status_of(draining->first) == 503);
    CHECK(net::make_refusal(f.srv->options, 11, draining->first, draining->second)[http::field::retry_after] == "1");
    f.srv->draining.store(false);
    f.engine.ready = false;
    auto not_ready = net::ws_refusal(*f.srv, upgrade(true));
    REQUIRE(not_ready);
    CHECK(net::http_status_of(not_ready->first) == 503);
}

TEST_CASE("route_request answers the small routes and every refusal without a socket") {
    path_fixture f;
    auto missing = net::route_request(*f.srv, request(http::verb::get, "/nope?x=1"));
    CHECK_FALSE(missing.generate);
    CHECK(missing.reply.status == 404);
    auto wrong_method = net::route_request(*f.srv, request(http::verb::get, "/v1/completions"));
    CHECK(wrong_method.reply.status == 405);
    auto no_key = net::route_request(*f.srv, request(http::verb::get, "/v1/models", {}, false));
    CHECK(no_key.reply.status == 401);
    CHECK(code_of(no_key.reply) == "unauthorized");
    CHECK(net::route_request(*f.srv, request(http::verb::get, "/health", {}, false)).reply.status == 200);
    auto tok = net::route_request(*f.srv, request(http::verb::post, "/tokenize", R"({"prompt":"ab"})"));
    REQUIRE(tok.reply.status == 200);
    CHECK(json::parse(tok.reply.body).at("count") == 2);
    auto chat = net::route_request(*f.srv, request(http::verb::post, "/v1/chat/completions", "{}"));
    REQUIRE(chat.generate);
    CHECK(*chat.generate == net::api_kind::chat);
    CHECK(net::route_request(*f.srv, request(http::verb::head, "/health", {}, false)).reply.status == 200);
    CHECK(net::route_request(*f.srv, request(http::verb::head, "/v1/completions")).reply.status == 405);
}

TEST_CASE("make_response sets Retry-After on 429/503 and keeps alive as the request asks") {
    path_fixture f;
    auto req = request(http::verb::get, "/ready");
    auto busy = net::make_response(req, f.srv->options, 503, "{}", "application/json");
    CHECK(busy[http::field::retry_after] == "1");
    CHECK(busy.keep_alive());
    req.keep_alive(false);
    auto ok = net::make_response(req, f.srv->options, 200, "{}", "application/json");
    CHECK(ok[http::field::retry_after].empty());
    CHECK_FALSE(ok.keep_alive());
    CHECK(ok[http::field::content_length] == "2");
}

TEST_CASE("admit_body refuses bad JSON and non-objects, and admits a valid body with its prompt") {
    path_fixture f;
    double tokenize_s = 0;
    auto bad = net::admit_body(*f.srv, net::api_kind::completion, "{\"prompt\":", tokenize_s);
    REQUIRE(std::holds_alternative<net::api_error>(bad));
    CHECK(std::get<net::api_error>(bad).code == status::parse_error);
    auto array = net::admit_body(*f.srv, net::api_kind::completion, "[1]", tokenize_s);
    CHECK(std::holds_alternative<net::api_error>(array));
    auto ok = net::admit_body(*f.srv, net::api_kind::completion, R"({"prompt":"abc","max_tokens":2})", tokenize_s);
    REQUIRE(std::holds_alternative<net::api_request>(ok));
    CHECK(std::get<net::api_request>(ok).gen.prompt.size() == 3);
}

TEST_CASE("ws_replies answers each client message as the session does") {
    path_fixture f;
    f.engine.submit_failure = status::queue_full;   // refused at submit: replies are synchronous
    const std::vector<std::string_view> msgs = {
        "not json", R"({"type":"generate"})", R"({"type":"eat","id":"a"})", R"({"type":"cancel","id":"b"})",
        R"({"type":"generate","id":"c","prompt":"hi"})"};
    auto out = net::ws_replies(f.srv, msgs);
    REQUIRE(out.size() == msgs.size());
    std::vector<std::string> ids, codes;
    for (const auto& m : out) {
        auto v = json::parse(m);
        CHECK(v.at("type") == "error");
        ids.emplace_back(v.at("id").as_string());
        codes.emplace_back(v.at("error").at("code").as_string());
    }
    CHECK(ids == std::vector<std::string>{"", "", "a", "b", "c"});
    CHECK(codes == std::vector<std::string>{"parse_error", "invalid_argument", "invalid_argument", "not_found",
                                            "queue_full"});
}
