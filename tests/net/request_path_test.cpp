// The socket-free part of the request path (net/request_path.hpp) that the fuzz
// targets drive: routing and small-route replies, the response a reply becomes,
// body admission, and WebSocket messages through a session.
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
    actors::metrics::registry registry;
    actors::calserve_metrics metrics;
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
}  // namespace

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
