// WebSocket edges: a client that sends and never reads is pushed back (bounded
// queued bytes), query strings on /v1/ws, handshake refusals in the JSON shape.
#include <catch2/catch.hpp>
#include <thread>

#include "tests/net/raw_client.hpp"

using namespace calserve;
using namespace calserve::test;
namespace websocket = beast::websocket;

namespace {
using ws_client = websocket::stream<tcp::socket>;

json::object recv_obj(ws_client& ws) {
    beast::flat_buffer buf;
    ws.read(buf);
    return json::parse(beast::buffers_to_string(buf.data())).as_object();
}

// Reads one stream's messages until it ends; returns the types seen, in order.
std::vector<std::string> read_stream(ws_client& ws) {
    std::vector<std::string> types;
    for (;;) {
        auto ev = recv_obj(ws);
        types.emplace_back(ev.at("type").as_string());
        if (types.back() == "done" || types.back() == "error") return types;
    }
}

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

double gauge(server_fixture& f, const std::string& name) {
    const auto text = f.registry.render();
    auto pos = text.find("\n" + name + " ");
    REQUIRE(pos != std::string::npos);
    return std::stod(text.substr(pos + name.size() + 2));
}
}  // namespace

TEST_CASE("WebSocket: a client that sends and never reads is pushed back and its queued bytes stay bounded",
          "[net][edges][ws]") {
    net::server_options o;
    o.ws_queue_bytes = 64 * 1024;
    server_fixture f(o);
    asio::io_context ioc;
    tcp::socket sock(ioc);
    sock.open(tcp::v4());
    sock.set_option(asio::socket_base::receive_buffer_size(4096));
    sock.set_option(asio::socket_base::send_buffer_size(4096));
    sock.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), f.port));
    ws_client flood(std::move(sock));
    flood.handshake("127.0.0.1", "/v1/ws");
    // Each cancel of an unknown id is answered with an error that repeats the 8 KB id:
    // 64 MB of answers if the server read everything, more than any socket buffers.
    const std::string frame = R"({"type":"cancel","id":")" + std::string(8192, 'i') + R"("})";
    constexpr int k_frames = 8000;
    std::atomic<int> sent{0};
    std::thread writer([&] {
        for (int i = 0; i < k_frames; ++i) {
            beast::error_code ec;
            flood.write(asio::buffer(frame), ec);
            if (ec) return;
            ++sent;
        }
    });
    // Wait until the writer is stuck (no progress for a while) or done.
    int last = -1;
    for (int i = 0; i < 400 && sent.load() != k_frames; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
        const int now = sent.load();
        if (now == last) break;
        last = now;
    }
    CHECK(sent.load() < k_frames);  // the server stopped reading
    // Bound: the queue limit plus one client message's answers.
    CHECK(gauge(f, "calserve_ws_queued_bytes") <= double(o.ws_queue_bytes + 2 * frame.size()));
    // Others are served meanwhile.
    CHECK(call(f.port, http::verb::get, "/health").result_int() == 200);
    {
        ws_client other(connect(ioc, f.port));
        other.handshake("127.0.0.1", "/v1/ws");
        other.write(asio::buffer(std::string(R"({"type":"generate","id":"g","prompt":"x","max_tokens":3})")));
        auto types = read_stream(other);
        CHECK(has(types, "started"));
        CHECK(types.back() == "done");
    }
    ::shutdown(flood.next_layer().native_handle(), SHUT_RDWR);  // unblocks the writer thread
    writer.join();
    flood.next_layer().close();  // unread answers: a reset, which ends the server's blocked write
    REQUIRE(wait_until([&] { return f.server->connections() == 0; }));
    CHECK(gauge(f, "calserve_ws_queued_bytes") == 0);
}

TEST_CASE("WebSocket upgrade on /v1/ws with a query string", "[net][edges][ws]") {
    server_fixture f;
    asio::io_context ioc;
    ws_client ws(connect(ioc, f.port));
    ws.handshake("127.0.0.1", "/v1/ws?client=test&x=y");
    ws.write(asio::buffer(std::string(R"({"type":"generate","id":"q","prompt":"x","max_tokens":2})")));
    auto types = read_stream(ws);
    CHECK(has(types, "started"));
    CHECK(types.back() == "done");
}

TEST_CASE("WebSocket handshake refusals use the JSON error shape", "[net][edges][ws]") {
    server_fixture f;
    const std::string upgrade = "GET /v1/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n";
    auto no_key = raw_exchange(f.port, upgrade + "Sec-WebSocket-Version: 13\r\n\r\n");
    REQUIRE(no_key);
    CHECK(no_key->result_int() == 400);
    CHECK(json::parse(no_key->body()).at("error").at("param") == "Sec-WebSocket-Key");

    auto old_version =
        raw_exchange(f.port, upgrade + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n");
    REQUIRE(old_version);
    CHECK(old_version->result_int() == 426);
    CHECK(old_version->at("Sec-WebSocket-Version") == "13");
    CHECK(json::parse(old_version->body()).at("error").at("param") == "Sec-WebSocket-Version");

    auto plain = raw_exchange(f.port, "GET /v1/ws HTTP/1.1\r\nHost: x\r\n\r\n");
    REQUIRE(plain);
    CHECK(plain->result_int() == 426);
    CHECK(json::parse(plain->body()).at("error").at("type") == "invalid_request_error");

    net::server_options o;
    o.api_key = "k";
    server_fixture g(o);
    auto denied =
        raw_exchange(g.port, upgrade + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
    REQUIRE(denied);
    CHECK(denied->result_int() == 401);
    CHECK(json::parse(denied->body()).at("error").at("code") == "unauthorized");
}

TEST_CASE("Server stop with a grace period ends SSE and WebSocket streams with an error, not a bare close",
          "[net][edges]") {
    server_fixture f;
    f.engine.gate_open = false;  // every stream stays in flight
    asio::io_context ioc;
    // SSE
    auto sse = raw_connect(ioc, f.port);
    const std::string body = R"({"prompt":"x","max_tokens":50,"stream":true})";
    asio::write(sse, asio::buffer("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                                  std::to_string(body.size()) + "\r\n\r\n" + body));
    // WebSocket
    ws_client ws(connect(ioc, f.port));
    ws.handshake("127.0.0.1", "/v1/ws");
    ws.write(asio::buffer(std::string(R"({"type":"generate","id":"w","prompt":"x","max_tokens":50})")));
    CHECK(recv_obj(ws).at("type") == "started");
    REQUIRE(wait_until([&] { return f.engine.in_flight() == 2; }));

    std::thread stopper([&] { f.server->stop(std::chrono::seconds(5)); });
    beast::flat_buffer buf;
    auto res = read_response(sse, buf);
    REQUIRE(res);  // the chunked body ended properly
    auto events = sse_events(res->body());
    REQUIRE(events.has_value());
    REQUIRE(events->size() >= 2);
    CHECK(events->back() == "[DONE]");
    auto err = json::parse((*events)[events->size() - 2]).at("error").as_object();
    CHECK(err.at("message") == "server shutting down");
    CHECK(err.at("type") == "service_unavailable_error");

    auto e = recv_obj(ws);
    CHECK(e.at("type") == "error");
    CHECK(e.at("id") == "w");
    CHECK(e.at("status") == 503);
    beast::flat_buffer rest;
    beast::error_code ec;
    ws.read(rest, ec);
    CHECK(ec == websocket::error::closed);
    CHECK(ws.reason().code == websocket::close_code::going_away);
    stopper.join();
    REQUIRE(wait_until([&] { return f.engine.cancels().size() == 2; }));
}

TEST_CASE("WebSocket: a stream's `started` comes before its deltas", "[net][edges][ws]") {
    server_fixture f;  // the fake engine emits tokens the moment it is submitted to
    asio::io_context ioc;
    ws_client ws(connect(ioc, f.port));
    ws.handshake("127.0.0.1", "/v1/ws");
    for (int i = 0; i < 20; ++i) {
        INFO("try " << i);
        ws.write(asio::buffer(std::string(R"({"type":"generate","id":"s","prompt":"x","max_tokens":3})")));
        auto types = read_stream(ws);
        CHECK(types.front() == "started");
        CHECK(types.back() == "done");
    }
    f.engine.submit_failure = status::overloaded;  // a refused one: only its error
    ws.write(asio::buffer(std::string(R"({"type":"generate","id":"r","prompt":"x"})")));
    CHECK(read_stream(ws) == std::vector<std::string>{"error"});
}
