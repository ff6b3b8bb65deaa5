// End-to-end over loopback: a real `calserve serve` process on a synthetic
// package, driven with HTTP (SSE and JSON) and WebSocket clients.
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <random>
#include <set>
#include <thread>

#include "tests/e2e/daemon.hpp"
#include "tests/e2e/e2e_support.hpp"
#include "tests/net/net_fixture.hpp"
#include "tests/support/model_support.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;
using namespace calserve::test;
namespace json = boost::json;
namespace websocket = boost::beast::websocket;


TEST_CASE("greedy over HTTP equals the reference transformer on both packages", "[e2e]") {
    for (std::string preset : {"tiny-dense-1chip", "tiny-moe-2chip"}) {
        INFO(preset);
        daemon_process d(serve_args(preset, {"device.sim.step_ms=0", "device.sim.d2h_ms=0"}));
        REQUIRE(d.started());
        auto prompt = random_prompt(11, 17);
        auto expected = reference_greedy(package_model_dir(test_package_dir(preset)), prompt, 10);
        auto res = post(d.port(), "/v1/completions", completion_body(prompt, 10, false));
        REQUIRE(res.result_int() == 200);
        auto body = json::parse(res.body()).as_object();
        auto text = std::string(body.at("choices").at(0).at("text").as_string());
        CHECK(text == reference_text(d.port(), expected));
        CHECK(body.at("usage").at("prompt_tokens").to_number<int>() == 17);
        CHECK(body.at("usage").at("completion_tokens").to_number<int>() == 10);
        CHECK(body.at("choices").at(0).at("finish_reason").as_string() == "length");
        REQUIRE(d.stop() == 0);
    }
}

TEST_CASE("SSE is well formed, ends with [DONE] and carries usage", "[e2e]") {
    daemon_process d(serve_args("tiny-dense-1chip", {"device.sim.step_ms=0", "device.sim.d2h_ms=0"}));
    REQUIRE(d.started());
    auto prompt = random_prompt(5, 9);
    auto res = post(d.port(), "/v1/completions", completion_body(prompt, 6, true));
    REQUIRE(res.result_int() == 200);
    REQUIRE(res[http::field::content_type].find("text/event-stream") != std::string::npos);
    auto events = sse_events(res.body());
    REQUIRE(events);
    REQUIRE(events->back() == "[DONE]");
    std::string text;
    bool saw_usage = false;
    for (std::size_t i = 0; i + 1 < events->size(); ++i) {
        auto chunk = json::parse((*events)[i]).as_object();
        CHECK(chunk.at("object").as_string() == "text_completion");
        auto& choices = chunk.at("choices").as_array();
        if (!choices.empty()) text += std::string(choices.at(0).at("text").as_string());
        if (auto* u = chunk.if_contains("usage"); u && u->is_object()) {
            saw_usage = true;
            CHECK(u->at("completion_tokens").to_number<int>() == 6);
            CHECK(u->at("prompt_tokens").to_number<int>() == 9);
        }
    }
    CHECK(saw_usage);
    CHECK(text == reference_text(d.port(), reference_greedy(package_model_dir(test_package_dir("tiny-dense-1chip")), prompt, 6)));
    REQUIRE(d.stop() == 0);
}

TEST_CASE("over-length prompts get 400 before device work, overload gets 429 with Retry-After", "[e2e]") {
    daemon_process d(serve_args("tiny-dense-1chip", {"runtime.slot_context=64", "runtime.max_running=1",
                                                     "runtime.max_queued=0", "device.sim.step_ms=20"}));
    REQUIRE(d.started());
    auto busy_before = metric(d.port(), "calserve_device_busy_seconds_total");
    auto res = post(d.port(), "/v1/completions", completion_body(random_prompt(1, 60), 10, false));
    REQUIRE(res.result_int() == 400);
    CHECK(res.body().find("context") != std::string::npos);
    CHECK(metric(d.port(), "calserve_device_busy_seconds_total") == busy_before);

    std::thread slow([&] { (void)post(d.port(), "/v1/completions", completion_body(random_prompt(2, 4), 30, false)); });
    REQUIRE(wait_until([&] { return metric(d.port(), "calserve_requests_running") >= 1; }));
    auto over = post(d.port(), "/v1/completions", completion_body(random_prompt(3, 4), 4, false));
    CHECK(over.result_int() == 429);
    CHECK(!over[http::field::retry_after].empty());
    slow.join();
    REQUIRE(d.stop() == 0);
}

TEST_CASE("32 concurrent SSE and WebSocket streams with cancels and deadlines", "[e2e]") {
    daemon_process d(serve_args("tiny-dense-1chip", {"device.sim.step_ms=1", "device.sim.d2h_ms=1", "runtime.max_running=8"}));
    REQUIRE(d.started());
    auto model_dir = package_model_dir(test_package_dir("tiny-dense-1chip"));
    constexpr int k_sse = 24;
    constexpr int k_ws = 8;
    std::mt19937 rng(99);
    struct job {
        std::vector<std::int32_t> prompt;
        int max_tokens;
        bool cancel;
        std::int64_t timeout_ms;
        std::string finish;
        std::string text;
        int ends = 0;
    };
    std::vector<job> jobs;
    for (int i = 0; i < k_sse + k_ws; ++i)
        jobs.push_back({random_prompt(200 + i, 1 + int(rng() % 24)), 2 + int(rng() % 14), i % 6 == 2,
                        i % 9 == 4 ? 5 : 0, {}, {}, 0});

    std::vector<std::thread> clients;
    for (int i = 0; i < k_sse; ++i) {
        clients.emplace_back([&, i] {
            auto& j = jobs[std::size_t(i)];
            asio::io_context ioc;
            auto s = connect(ioc, d.port());
            http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
            req.set(http::field::host, "127.0.0.1");
            req.set(http::field::content_type, "application/json");
            req.body() = completion_body(j.prompt, j.max_tokens, true, j.timeout_ms);
            req.prepare_payload();
            http::write(s, req);
            beast::flat_buffer buf;
            http::response_parser<http::string_body> parser;
            parser.body_limit(1 << 24);
            if (j.cancel) {  // disconnect after the headers: the server must cancel
                http::read_header(s, buf, parser);
                s.close();
                j.finish = "client-cancel";
                j.ends = 1;
                return;
            }
            http::read(s, buf, parser);
            auto res = parser.release();
            auto events = sse_events(res.body());
            if (res.result_int() != 200 || !events || events->back() != "[DONE]") {
                j.finish = "bad:" + std::to_string(res.result_int());
                j.ends = 1;
                return;
            }
            for (std::size_t k = 0; k + 1 < events->size(); ++k) {
                auto chunk = json::parse((*events)[k]).as_object();
                if (chunk.contains("error")) {
                    j.finish = "error";
                    ++j.ends;
                    continue;
                }
                auto& choices = chunk.at("choices").as_array();
                if (choices.empty()) continue;
                j.text += std::string(choices.at(0).at("text").as_string());
                if (auto& fr = choices.at(0).at("finish_reason"); fr.is_string()) {
                    j.finish = std::string(fr.as_string());
                    ++j.ends;
                }
            }
        });
    }
    clients.emplace_back([&] {
        asio::io_context ioc;
        websocket::stream<tcp::socket> ws(connect(ioc, d.port()));
        ws.handshake("127.0.0.1", "/v1/ws");
        for (int k = 0; k < k_ws; ++k) {
            auto& j = jobs[std::size_t(k_sse + k)];
            auto o = json::parse(completion_body(j.prompt, j.max_tokens, false, j.timeout_ms)).as_object();
            o["type"] = "generate";
            o["id"] = "w" + std::to_string(k);
            ws.write(asio::buffer(json::serialize(o)));
            if (j.cancel) ws.write(asio::buffer(json::serialize(json::object{{"type", "cancel"}, {"id", o["id"]}})));
        }
        int open = k_ws;
        while (open > 0) {
            beast::flat_buffer buf;
            ws.read(buf);
            auto ev = json::parse(beast::buffers_to_string(buf.data())).as_object();
            auto id = std::string(ev.at("id").as_string());
            auto& j = jobs[std::size_t(k_sse + std::stoi(id.substr(1)))];
            auto type = ev.at("type").as_string();
            if (type == "delta") j.text += std::string(ev.at("text").as_string());
            if (type == "done" || type == "error") {
                j.finish = type == "done" ? std::string(ev.at("finish_reason").as_string()) : "error";
                ++j.ends;
                --open;
            }
        }
        ws.close(websocket::close_code::normal);
    });
    for (auto& c : clients) c.join();

    int survived = 0;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
        auto& j = jobs[i];
        INFO("job " << i << " finish " << j.finish);
        REQUIRE(j.ends == 1);
        if (j.finish == "length") {
            ++survived;
            CHECK(j.text == reference_text(d.port(), reference_greedy(model_dir, j.prompt, j.max_tokens)));
        }
    }
    CHECK(survived >= 16);
    REQUIRE(wait_until([&] { return metric(d.port(), "calserve_requests_running") == 0; }));
    CHECK(metric(d.port(), "calserve_kv_blocks_used") == 0);
    REQUIRE(d.stop() == 0);
}

TEST_CASE("SIGTERM drains in-flight work and exits 0", "[e2e]") {
    daemon_process d(serve_args("tiny-dense-1chip", {"device.sim.step_ms=10"}));
    REQUIRE(d.started());
    http::response<http::string_body> res;
    std::thread client([&] { res = post(d.port(), "/v1/completions", completion_body(random_prompt(8, 5), 30, false)); });
    REQUIRE(wait_until([&] { return metric(d.port(), "calserve_requests_running") >= 1; }));
    d.signal(SIGTERM);
    client.join();
    CHECK(res.result_int() == 200);
    CHECK(d.wait_exit(60) == 0);
}

TEST_CASE("serve with no package writes and serves the default package", "[e2e]") {
    auto home = scratch_dir("serve-home");
    setenv("CALSERVE_HOME", home.c_str(), 1);
    daemon_process d({"--set", "log.level=warn"});
    unsetenv("CALSERVE_HOME");
    REQUIRE(d.started());
    CHECK(std::filesystem::exists(home / "packages" / "tiny-dense-1chip" / "calserve-manifest.json"));
    auto models = call(d.port(), http::verb::get, "/v1/models");
    CHECK(models.result_int() == 200);
    auto ready = call(d.port(), http::verb::get, "/ready");
    CHECK(ready.result_int() == 200);
    REQUIRE(d.stop() == 0);
}
