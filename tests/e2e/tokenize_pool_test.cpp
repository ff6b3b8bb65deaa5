// End-to-end: prompt tokenization runs on the tokenize pool, off the network
// threads. While several clients send ~1 MB prompts, /health keeps answering; the
// pool's threads exist ("cs-tokenize") and count every generation request; a
// prompt longer than any text that fits the usable context is refused with 400
// before any of it reaches the tokenizer (calserve_tokenize_bytes_total unmoved).
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>

#include "model/tokenizer/tokenizer.hpp"
#include "tests/e2e/daemon.hpp"
#include "tests/e2e/e2e_support.hpp"
#include "tests/net/net_fixture.hpp"
#include "tests/support/model_support.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;
using namespace calserve::test;
namespace websocket = boost::beast::websocket;

namespace {

const std::string k_preset = "tiny-dense-1chip";

int threads_named(int pid, const std::string& name) {
    int n = 0;
    for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
        std::ifstream comm(task.path() / "comm");
        std::string line;
        std::getline(comm, line);
        n += line == name ? 1 : 0;
    }
    return n;
}

std::string words(std::size_t bytes, unsigned seed) {
    std::mt19937 rng(seed);
    const char* w[] = {"serve ", "token ", "prompt ", "device ", "stream ", "ready ", "health "};
    std::string out;
    while (out.size() < bytes) out += w[rng() % 7];
    out.resize(bytes);
    return out;
}

http::response<http::string_body> complete(std::uint16_t port, const std::string& prompt) {
    json::object o{{"model", "m"}, {"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}};
    return post(port, "/v1/completions", json::serialize(o));
}

std::string error_code(const http::response<http::string_body>& res) {
    boost::system::error_code ec;
    auto v = json::parse(res.body(), ec);
    if (ec || !v.is_object() || !v.as_object().contains("error")) return "";
    return std::string(v.at("error").at("code").as_string());
}

}  // namespace

TEST_CASE("tokenize pool: 1 MB prompts are tokenized off the network threads, /health answers meanwhile",
          "[e2e][tokenize]") {
    auto tok = model::tokenizer::load(package_model_dir(test_package_dir(k_preset)));
    REQUIRE(tok);
    std::int64_t ctx = 0;
    {
        daemon_process probe(serve_args(k_preset, {"device.sim.step_ms=0"}));
        REQUIRE(probe.started());
        auto models = json::parse(call(probe.port(), http::verb::get, "/v1/models").body());
        ctx = models.at("data").at(0).at("max_model_len").to_number<std::int64_t>();
        REQUIRE(probe.stop() == 0);
    }
    auto bound = (*tok)->max_text_bytes(ctx - 1);
    REQUIRE(bound);
    const std::size_t big = std::size_t(1) << 20;
    const auto body_limit = std::max(*bound, big) + big;
    daemon_process d(serve_args(k_preset, {"device.sim.step_ms=1", "server.tokenize_threads=2",
                                           "server.max_body_bytes=" + std::to_string(body_limit)}));
    REQUIRE(d.started());
    CHECK(threads_named(d.pid(), "cs-tokenize") == 2);
    const double jobs0 = metric(d.port(), "calserve_tokenize_jobs_total");
    REQUIRE(jobs0 >= 0);

    // Four clients, three ~1 MB prompts each (below the byte bound when it is above
    // 1 MB; all far over the usable context): each is refused with 400.
    const std::size_t each = std::min(big, *bound);
    std::vector<std::future<std::vector<std::string>>> clients;
    for (unsigned c = 0; c < 4; ++c) {
        clients.push_back(std::async(std::launch::async, [&, c] {
            std::vector<std::string> codes;
            for (unsigned r = 0; r < 3; ++r) {
                auto res = complete(d.port(), words(each, c * 10 + r));
                codes.push_back(std::to_string(res.result_int()) + " " + error_code(res));
            }
            return codes;
        }));
    }
    int health_ok = 0, health_asked = 0;
    auto busy = [&] {
        for (auto& c : clients)
            if (c.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return true;
        return false;
    };
    while (busy() || health_asked < 5) {
        ++health_asked;
        health_ok += call(d.port(), http::verb::get, "/health").result_int() == 200 ? 1 : 0;
    }
    CHECK(health_ok == health_asked);
    for (auto& c : clients)
        for (const auto& code : c.get()) CHECK(code == "400 context_overflow");
    CHECK(metric(d.port(), "calserve_tokenize_jobs_total") == jobs0 + 12);

    // Longer than any text that fits: refused without tokenizing any of it.
    const double bytes0 = metric(d.port(), "calserve_tokenize_bytes_total");
    const double refused0 = metric(d.port(), "calserve_tokenize_refused_total");
    auto res = complete(d.port(), words(*bound + 1, 99));
    CHECK(res.result_int() == 400);
    CHECK(error_code(res) == "context_overflow");
    CHECK(metric(d.port(), "calserve_tokenize_bytes_total") == bytes0);
    CHECK(metric(d.port(), "calserve_tokenize_refused_total") == refused0 + 1);

    // A prompt that fits is still served (through the same pool).
    auto prompt = random_prompt(81, 6);
    CHECK(sse_text(d.port(), prompt, 4) ==
          reference_text(d.port(), reference_greedy(package_model_dir(test_package_dir(k_preset)), prompt, 4)));
    CHECK(metric(d.port(), "calserve_tokenize_jobs_total") == jobs0 + 14);

    // WebSocket generates go through the same pool: three ~1 MB prompts sent at once on
    // one socket are refused in order while /health keeps answering, then a short one runs.
    auto ws_done = std::async(std::launch::async, [&] {
        asio::io_context ioc;
        websocket::stream<tcp::socket> ws(connect(ioc, d.port()));
        ws.handshake("127.0.0.1", "/v1/ws");
        for (unsigned r = 0; r < 3; ++r) {
            json::object o{{"type", "generate"}, {"id", "big" + std::to_string(r)}, {"prompt", words(each, 50 + r)},
                           {"max_tokens", 4}};
            ws.write(asio::buffer(json::serialize(o)));
        }
        ws.write(asio::buffer(json::serialize(json::object{
            {"type", "generate"}, {"id", "small"}, {"prompt", to_json(prompt)}, {"max_tokens", 4}, {"temperature", 0}})));
        std::vector<std::string> seen;  // "id type[ code]" of every started/error/done
        while (seen.empty() || seen.back().rfind("small done", 0) != 0) {
            beast::flat_buffer buf;
            ws.read(buf);
            auto v = json::parse(beast::buffers_to_string(buf.data())).as_object();
            const std::string type(v.at("type").as_string());
            if (type == "delta") continue;
            std::string line = std::string(v.at("id").as_string()) + " " + type;
            if (type == "error") line += " " + std::string(v.at("error").at("code").as_string());
            seen.push_back(line);
            if (type == "error" && v.at("id") == "small") break;
        }
        ws.close(websocket::close_code::normal);
        return seen;
    });
    health_ok = health_asked = 0;
    while (ws_done.wait_for(std::chrono::seconds(0)) != std::future_status::ready || health_asked < 5) {
        ++health_asked;
        health_ok += call(d.port(), http::verb::get, "/health").result_int() == 200 ? 1 : 0;
    }
    CHECK(health_ok == health_asked);
    CHECK(ws_done.get() == std::vector<std::string>{"big0 error context_overflow", "big1 error context_overflow",
                                                    "big2 error context_overflow", "small started", "small done"});
    CHECK(metric(d.port(), "calserve_tokenize_jobs_total") == jobs0 + 18);
    REQUIRE(d.stop() == 0);
}
