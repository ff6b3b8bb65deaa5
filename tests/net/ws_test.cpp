// WebSocket /v1/ws: multiplexing by client id, cancel, errors, slow consumer,
// disconnect -> cancel.
#include <catch2/catch.hpp>
#include <set>

#include "tests/net/net_fixture.hpp"

using namespace calserve;
using namespace calserve::test;
namespace websocket = beast::websocket;

namespace {
using ws_client = websocket::stream<tcp::socket>;

std::unique_ptr<ws_client> ws_connect(asio::io_context& ioc, std::uint16_t port, int rcvbuf = 0) {
    tcp::socket s(ioc);
    if (rcvbuf > 0) {
        s.open(tcp::v4());
        s.set_option(asio::socket_base::receive_buffer_size(rcvbuf));
    }
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    auto ws = std::make_unique<ws_client>(std::move(s));
    ws->read_message_max(64 * 1024 * 1024);
    ws->handshake("127.0.0.1", "/v1/ws");
    return ws;
}

void send(ws_client& ws, const std::string& text) { ws.write(asio::buffer(text)); }

json::object recv(ws_client& ws) {
    beast::flat_buffer buf;
    ws.read(buf);
    return json::parse(beast::buffers_to_string(buf.data())).as_object();
}

struct stream_log {
    std::string text;
    int started = 0, done = 0, errors = 0;
    json::object last;
};

// Reads events until every id in `ids` has ended (done or error).
std::map<std::string, stream_log> read_until_ended(ws_client& ws, const std::set<std::string>& ids) {
    std::map<std::string, stream_log> logs;
    std::set<std::string> open = ids;
    while (!open.empty()) {
        auto ev = recv(ws);
        std::string id(ev.at("id").as_string());
        auto& l = logs[id];
        const auto type = ev.at("type").as_string();
        if (type == "started") ++l.started;
        if (type == "delta") l.text += ev.at("text").as_string();
        if (type == "done") ++l.done;
        if (type == "error") ++l.errors;
        if (type == "done" || type == "error") {
            l.last = ev;
            open.erase(id);
        }
    }
    return logs;
}
}  // namespace

TEST_CASE("WebSocket multiplexes several generations on one socket") {
    server_fixture f;
    asio::io_context ioc;
    auto ws = ws_connect(ioc, f.port);
    send(*ws, R"({"type":"generate","id":"c1","prompt":"hello","max_tokens":5})");
    send(*ws, R"({"type":"generate","id":"c2","prompt":[1,2],"max_tokens":7})");
    send(*ws, R"({"type":"generate","id":"c3","messages":[{"role":"user","content":"x"}],"max_tokens":3})");
    auto logs = read_until_ended(*ws, {"c1", "c2", "c3"});
    CHECK(logs["c1"].text == "abcde");
    CHECK(logs["c2"].text == "abcdefg");
    CHECK(logs["c3"].text == "abc");
    for (auto& [id, l] : logs) {
        INFO(id);
        CHECK(l.started == 1);
        CHECK(l.done == 1);
        CHECK(l.errors == 0);
        CHECK(l.last.at("finish_reason") == "length");
    }
    CHECK(logs["c1"].last.at("usage").at("prompt_tokens") == 5);
    CHECK(logs["c2"].last.at("usage").at("completion_tokens") == 7);
    // An id can be reused once its stream ended.
    send(*ws, R"({"type":"generate","id":"c1","prompt":"x","max_tokens":2})");
    CHECK(read_until_ended(*ws, {"c1"})["c1"].text == "ab");
}

TEST_CASE("WebSocket chat with thinking and tools: reasoning, delta and tool_call events") {
    server_fixture f;
    f.engine.script = {"<think>\nplan", "</think>\n\n", "Calling.", "\n<tool_call>\n{\"name\": \"f\", ",
                       "\"arguments\": {\"a\":", "1}}\n</tool_call>"};
    f.engine.final_reason = calserve::actors::finish_reason::stop;
    asio::io_context ioc;
    auto ws = ws_connect(ioc, f.port);
    send(*ws, R"({"type":"generate","id":"t","messages":[{"role":"user","content":"x"}],"max_tokens":6,
                  "chat_template_kwargs":{"enable_thinking":true},
                  "tools":[{"type":"function","function":{"name":"f"}}]})");
    std::string reasoning, content, arguments, name, call_id;
    json::object done;
    for (;;) {
        auto ev = recv(*ws);
        const auto type = ev.at("type").as_string();
        if (type == "reasoning") reasoning += ev.at("text").as_string();
        if (type == "delta") content += ev.at("text").as_string();
        if (type == "tool_call") {
            CHECK(ev.at("index") == 0);
            if (ev.contains("name")) {
                name = ev.at("name").as_string();
                call_id = ev.at("call_id").as_string();
            }
            arguments += ev.at("arguments").as_string();
        }
        if (type == "done" || type == "error") {
            done = ev;
            break;
        }
    }
    CHECK(reasoning == "plan");
    CHECK(content == "Calling.");
    CHECK(name == "f");
    CHECK(call_id.starts_with("call_"));
    CHECK(arguments == "{\"a\":1}");
    CHECK(done.at("type") == "done");
    CHECK(done.at("finish_reason") == "tool_calls");
}

TEST_CASE("WebSocket cancel ends one stream, others continue") {
    server_fixture f;
    f.engine.gate_open = false;
    asio::io_context ioc;
    auto ws = ws_connect(ioc, f.port);
    send(*ws, R"({"type":"generate","id":"a","prompt":"x","max_tokens":4})");
    send(*ws, R"({"type":"generate","id":"b","prompt":"x","max_tokens":4})");
    CHECK(recv(*ws).at("type") == "started");
    CHECK(recv(*ws).at("type") == "started");
    send(*ws, R"({"type":"cancel","id":"a"})");
    auto a = read_until_ended(*ws, {"a"});
    CHECK(a["a"].done == 1);
    CHECK(a["a"].last.at("finish_reason") == "cancelled");
    f.engine.gate_open = true;
    auto b = read_until_ended(*ws, {"b"});
    CHECK(b["b"].text == "abcd");
    CHECK(b["b"].last.at("finish_reason") == "length");
    send(*ws, R"({"type":"cancel","id":"zzz"})");
    auto err = recv(*ws);
    CHECK(err.at("type") == "error");
    CHECK(err.at("id") == "zzz");
    CHECK(err.at("error").at("code") == "not_found");
}

TEST_CASE("WebSocket errors name the id and the field") {
    server_fixture f;
    asio::io_context ioc;
    auto ws = ws_connect(ioc, f.port);
    send(*ws, R"({"type":"generate","id":"q","prompt":"x","temperature":9})");
    auto e = recv(*ws);
    CHECK(e.at("type") == "error");
    CHECK(e.at("id") == "q");
    CHECK(e.at("status") == 400);
    CHECK(e.at("error").at("param") == "temperature");
    send(*ws, "not json");
    CHECK(recv(*ws).at("error").at("param") == "message");
    send(*ws, R"({"type":"generate","prompt":"x"})");
    CHECK(recv(*ws).at("error").at("param") == "id");
    send(*ws, R"({"type":"jump","id":"j"})");
    CHECK(recv(*ws).at("error").at("param") == "type");
    f.engine.submit_failure = status::overloaded;
    send(*ws, R"({"type":"generate","id":"o","prompt":"x"})");
    auto o = recv(*ws);
    CHECK(o.at("status") == 429);
    CHECK(o.at("error").at("code") == "overloaded");
}

TEST_CASE("WebSocket slow consumer: its stream is cancelled, another socket is unaffected") {
    net::server_options o;
    o.write_queue = 8;
    server_fixture f(o);
    f.engine.text_bytes = 4096;
    asio::io_context ioc;
    auto slow = ws_connect(ioc, f.port, 4096);
    // ~16 MB of deltas: far more than socket buffers hold while the client reads nothing.
    send(*slow, R"({"type":"generate","id":"big","prompt":"x","max_tokens":4000,"ignore_eos":true})");
    REQUIRE(wait_until([&] { return f.engine.finished.load() == 1; }));
    auto big_id = f.engine.submitted().at(0).id;

    auto fast = ws_connect(ioc, f.port);
    send(*fast, R"({"type":"generate","id":"small","prompt":"x","max_tokens":5})");
    auto small = read_until_ended(*fast, {"small"});
    CHECK(small["small"].done == 1);
    CHECK(small["small"].text.size() == 5 * 4096);

    auto big = read_until_ended(*slow, {"big"});
    CHECK(big["big"].errors == 1);
    CHECK(big["big"].done == 0);
    CHECK(big["big"].last.at("error").at("code") == "queue_full");
    CHECK(big["big"].text.size() < 4000u * 4096u);
    auto cancels = f.engine.cancels();
    CHECK(std::find(cancels.begin(), cancels.end(), big_id) != cancels.end());
}

TEST_CASE("WebSocket disconnect cancels its running streams") {
    server_fixture f;
    f.engine.gate_open = false;
    {
        asio::io_context ioc;
        auto ws = ws_connect(ioc, f.port);
        send(*ws, R"({"type":"generate","id":"a","prompt":"x","max_tokens":4})");
        send(*ws, R"({"type":"generate","id":"b","prompt":"x","max_tokens":4})");
        REQUIRE(wait_until([&] { return f.engine.in_flight() == 2; }));
        ws->next_layer().close();
    }
    REQUIRE(wait_until([&] { return f.engine.cancels().size() == 2; }));
    REQUIRE(wait_until([&] { return f.engine.in_flight() == 0; }));
}
