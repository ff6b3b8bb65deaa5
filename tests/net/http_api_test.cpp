// HTTP API over loopback against a fake engine: SSE shape, non-stream shape,
// status mapping, auth, drain, disconnect -> cancel.
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>
#include <map>
#include <fstream>
#include <unistd.h>

#include "net/api_error.hpp"
#include "tests/net/net_fixture.hpp"

using namespace calserve;
using namespace calserve::test;

namespace {
json::object parse_obj(const std::string& s) { return json::parse(s).as_object(); }

std::string error_code_of(const http::response<http::string_body>& r) {
    return std::string(parse_obj(r.body()).at("error").at("code").as_string());
}
}  // namespace

TEST_CASE("SSE completion stream is well formed and ends with [DONE]") {
    server_fixture f;
    auto r = post(f.port, "/v1/completions",
                  R"({"model":"fake-model","prompt":"hello","max_tokens":5,"stream":true,
                      "stream_options":{"include_usage":true}})");
    REQUIRE(r.result_int() == 200);
    CHECK(r[http::field::content_type] == "text/event-stream");
    auto events = sse_events(r.body());
    REQUIRE(events.has_value());
    REQUIRE(events->size() >= 3);
    CHECK(events->back() == "[DONE]");
    std::string text;
    std::string finish;
    std::string id;
    for (std::size_t i = 0; i + 2 < events->size(); ++i) {
        auto c = parse_obj((*events)[i]);
        CHECK(c.at("object") == "text_completion");
        CHECK(c.at("model") == "fake-model");
        CHECK(c.at("usage").is_null());
        if (id.empty()) id = std::string(c.at("id").as_string());
        CHECK(c.at("id").as_string() == id);
        auto& choice = c.at("choices").as_array().at(0).as_object();
        text += choice.at("text").as_string();
        if (!choice.at("finish_reason").is_null()) finish = std::string(choice.at("finish_reason").as_string());
    }
    CHECK(id.rfind("cmpl-", 0) == 0);
    CHECK(text == "abcde");
    CHECK(finish == "length");
    auto usage_chunk = parse_obj((*events)[events->size() - 2]);
    CHECK(usage_chunk.at("choices").as_array().empty());
    CHECK(usage_chunk.at("usage").at("prompt_tokens") == 5);
    CHECK(usage_chunk.at("usage").at("completion_tokens") == 5);
    CHECK(usage_chunk.at("usage").at("total_tokens") == 10);
}

TEST_CASE("SSE chat stream: role first, chunk objects, no usage unless asked") {
    server_fixture f;
    auto r = post(f.port, "/v1/chat/completions",
                  R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true})");
    REQUIRE(r.result_int() == 200);
    auto events = sse_events(r.body());
    REQUIRE(events.has_value());
    CHECK(events->back() == "[DONE]");
    auto first = parse_obj(events->front());
    CHECK(first.at("object") == "chat.completion.chunk");
    CHECK(first.at("id").as_string().starts_with("chatcmpl-"));
    CHECK(first.at("choices").at(0).at("delta").at("role") == "assistant");
    CHECK_FALSE(first.contains("usage"));
    std::string text;
    for (std::size_t i = 0; i + 1 < events->size(); ++i) {
        auto d = parse_obj((*events)[i]).at("choices").at(0).at("delta").as_object();
        if (auto* c = d.if_contains("content")) text += c->as_string();
    }
    CHECK(text == "abc");
    auto last = parse_obj((*events)[events->size() - 2]);
    CHECK(last.at("choices").at(0).at("finish_reason") == "length");
    // The chat template was applied before encoding.
    auto sub = f.engine.submitted();
    REQUIRE(sub.size() == 1);
    CHECK(sub[0].prompt.size() == std::string("user: hi\nassistant: ").size());
}

TEST_CASE("Non-streaming completion and chat responses aggregate with usage") {
    server_fixture f;
    auto r = post(f.port, "/v1/completions", R"({"prompt":[1,2,3],"max_tokens":4,"logprobs":2})");
    REQUIRE(r.result_int() == 200);
    auto o = parse_obj(r.body());
    CHECK(o.at("object") == "text_completion");
    CHECK(o.at("choices").at(0).at("text") == "abcd");
    CHECK(o.at("choices").at(0).at("finish_reason") == "length");
    auto lp = o.at("choices").at(0).at("logprobs").as_object();
    CHECK(lp.at("tokens").as_array().size() == 4);
    CHECK(lp.at("token_logprobs").as_array().size() == 4);
    CHECK(lp.at("top_logprobs").at(0).as_object().size() == 2);
    CHECK(o.at("usage").at("prompt_tokens") == 3);
    CHECK(o.at("usage").at("completion_tokens") == 4);

    auto c = post(f.port, "/v1/chat/completions",
                  R"({"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"max_completion_tokens":2,
                      "logprobs":true,"top_logprobs":1,"temperature":0,"seed":7,"stop":["zz"]})");
    REQUIRE(c.result_int() == 200);
    auto co = parse_obj(c.body());
    CHECK(co.at("object") == "chat.completion");
    CHECK(co.at("choices").at(0).at("message").at("role") == "assistant");
    CHECK(co.at("choices").at(0).at("message").at("content") == "ab");
    CHECK(co.at("choices").at(0).at("logprobs").at("content").as_array().size() == 2);
    auto sub = f.engine.submitted();
    REQUIRE(sub.size() == 2);
    CHECK(sub[1].sampling.temperature == 0.0f);
    CHECK(sub[1].sampling.seed == std::optional<std::uint64_t>(7));
    CHECK(sub[1].stop == std::vector<std::string>{"zz"});
    CHECK(sub[1].max_tokens == 2);
}

TEST_CASE("n choices: every index streams and aggregates, usage sums, each choice has its own seed") {
    server_fixture f;
    auto r = post(f.port, "/v1/completions",
                  R"({"prompt":[1,2,3],"max_tokens":4,"n":3,"seed":40,"stream":true,
                      "stream_options":{"include_usage":true}})");
    REQUIRE(r.result_int() == 200);
    auto events = sse_events(r.body());
    REQUIRE(events.has_value());
    CHECK(events->back() == "[DONE]");
    std::map<std::int64_t, std::string> text, finish;
    std::set<std::string> ids;
    for (std::size_t i = 0; i + 2 < events->size(); ++i) {
        auto c = parse_obj((*events)[i]);
        ids.insert(std::string(c.at("id").as_string()));
        auto& choice = c.at("choices").as_array().at(0).as_object();
        const auto index = choice.at("index").as_int64();
        text[index] += choice.at("text").as_string();
        if (!choice.at("finish_reason").is_null()) finish[index] = std::string(choice.at("finish_reason").as_string());
    }
    CHECK(ids.size() == 1);  // one response id for every choice
    CHECK(text == std::map<std::int64_t, std::string>{{0, "abcd"}, {1, "abcd"}, {2, "abcd"}});
    CHECK(finish.size() == 3);
    auto usage = parse_obj((*events)[events->size() - 2]).at("usage");
    CHECK(usage.at("prompt_tokens") == 3);  // the prompt once
    CHECK(usage.at("completion_tokens") == 12);
    auto sub = f.engine.submitted();
    REQUIRE(sub.size() == 3);
    std::set<std::uint64_t> seeds;
    for (const auto& s : sub) seeds.insert(s.sampling.seed.value_or(0));
    CHECK(seeds == std::set<std::uint64_t>{40, 41, 42});
    CHECK(sub[1].id == sub[0].id + "-1");

    auto c = post(f.port, "/v1/chat/completions",
                  R"({"messages":[{"role":"user","content":"x"}],"max_tokens":2,"n":2})");
    REQUIRE(c.result_int() == 200);
    auto co = parse_obj(c.body());
    const auto& choices = co.at("choices").as_array();
    REQUIRE(choices.size() == 2);
    for (std::int64_t i = 0; i < 2; ++i) {
        CHECK(choices[std::size_t(i)].at("index") == i);
        CHECK(choices[std::size_t(i)].at("message").at("content") == "ab");
        CHECK(choices[std::size_t(i)].at("finish_reason") == "length");
    }
    CHECK(co.at("usage").at("completion_tokens") == 4);
}

TEST_CASE("n choices: a failing choice fails the request and cancels the others") {
    server_fixture f;
    f.engine.final_reason = actors::finish_reason::error;
    f.engine.final_failure = error_info{status::ccu_exception, "injected"};
    f.engine.hold_suffix = "-1";  // choice 1 is still running when choice 0 fails, however slow the host
    auto r = post(f.port, "/v1/completions", R"({"prompt":"x","max_tokens":3,"n":2})");
    CHECK(r.result_int() >= 500);
    CHECK(error_code_of(r) == "ccu_exception");
    REQUIRE(f.engine.submitted().size() == 2);
    const auto cancels = f.engine.cancels();
    CHECK(std::find(cancels.begin(), cancels.end(), f.engine.submitted()[1].id) != cancels.end());
}

TEST_CASE("Every parameter validation error names its field") {
    server_fixture f;
    struct bad {
        const char* route;
        const char* body;
        const char* field;
    };
    const bad table[] = {
        {"/v1/completions", R"({"max_tokens":3})", "prompt"},
        {"/v1/completions", R"({"prompt":7})", "prompt"},
        {"/v1/completions", R"({"prompt":[]})", "prompt"},
        {"/v1/completions", R"({"prompt":["a","b"]})", "prompt"},
        {"/v1/completions", R"({"prompt":[1,-2]})", "prompt[1]"},
        {"/v1/completions", R"({"prompt":[1,100000]})", "prompt[1]"},
        {"/v1/completions", R"({"prompt":"x","model":3})", "model"},
        {"/v1/completions", R"({"prompt":"x","max_tokens":0})", "max_tokens"},
        {"/v1/completions", R"({"prompt":"x","max_tokens":"9"})", "max_tokens"},
        {"/v1/completions", R"({"prompt":"x","max_tokens":9000})", "max_tokens"},
        {"/v1/completions", R"({"prompt":"x","max_completion_tokens":-1})", "max_completion_tokens"},
        {"/v1/completions", R"({"prompt":"x","temperature":2.5})", "temperature"},
        {"/v1/completions", R"({"prompt":"x","temperature":"hot"})", "temperature"},
        {"/v1/completions", R"({"prompt":"x","top_p":0})", "top_p"},
        {"/v1/completions", R"({"prompt":"x","top_k":1.5})", "top_k"},
        {"/v1/completions", R"({"prompt":"x","min_p":1.5})", "min_p"},
        {"/v1/completions", R"({"prompt":"x","presence_penalty":3})", "presence_penalty"},
        {"/v1/completions", R"({"prompt":"x","frequency_penalty":-3})", "frequency_penalty"},
        {"/v1/completions", R"({"prompt":"x","repetition_penalty":0})", "repetition_penalty"},
        {"/v1/completions", R"({"prompt":"x","seed":"s"})", "seed"},
        {"/v1/completions", R"({"prompt":"x","stop":5})", "stop"},
        {"/v1/completions", R"({"prompt":"x","stop":["a",1]})", "stop[1]"},
        {"/v1/completions", R"({"prompt":"x","logprobs":21})", "logprobs"},
        {"/v1/completions", R"({"prompt":"x","logit_bias":{"abc":1}})", "logit_bias.abc"},
        {"/v1/completions", R"({"prompt":"x","logit_bias":{"5":101}})", "logit_bias.5"},
        {"/v1/completions", R"({"prompt":"x","logit_bias":[1]})", "logit_bias"},
        {"/v1/completions", R"({"prompt":"x","ignore_eos":1})", "ignore_eos"},
        {"/v1/completions", R"({"prompt":"x","n":0})", "n"},
        {"/v1/completions", R"({"prompt":"x","n":17})", "n"},
        {"/v1/completions", R"({"prompt":"x","stream":"yes"})", "stream"},
        {"/v1/completions", R"({"prompt":"x","stream_options":{"include_usage":true}})", "stream_options"},
        {"/v1/completions", R"({"prompt":"x","stream":true,"stream_options":{"include_usage":1}})",
         "stream_options.include_usage"},
        {"/v1/completions", R"({"prompt":"x","stop_token_ids":[1,"a"]})", "stop_token_ids[1]"},
        {"/v1/completions", R"({"prompt":"x","timeout_ms":0})", "timeout_ms"},
        {"/v1/completions", R"([1,2])", "body"},
        {"/v1/completions", R"({"prompt":)", "body"},
        {"/v1/chat/completions", R"({"prompt":"x"})", "messages"},
        {"/v1/chat/completions", R"({"messages":[]})", "messages"},
        {"/v1/chat/completions", R"({"messages":[{"role":"robot","content":"x"}]})", "messages[0].role"},
        {"/v1/chat/completions", R"({"messages":[{"role":"user"}]})", "messages[0].content"},
        {"/v1/chat/completions", R"({"messages":[{"role":"user","content":[{"type":"image"}]}]})",
         "messages[0].content[0].type"},
        {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"logprobs":3})", "logprobs"},
        {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})",
         "top_logprobs"},
        {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":30})",
         "top_logprobs"},
    };
    for (const auto& b : table) {
        INFO(b.route << " " << b.body);
        auto r = post(f.port, b.route, b.body);
        CHECK(r.result_int() == 400);
        auto err = parse_obj(r.body()).at("error").as_object();
        CHECK(err.at("param") == b.field);
        CHECK(std::string(err.at("message").as_string()).find(b.field) != std::string::npos);
        CHECK(err.at("type") == "invalid_request_error");
        CHECK(err.contains("code"));
    }
    CHECK(f.engine.submitted().empty());  // no invalid request reached the engine
}

TEST_CASE("Status mapping: 404 model/route, 405, 413, 429, 503, 504") {
    net::server_options o;
    o.max_body_bytes = 2048;
    server_fixture f(o);
    auto unknown_model = post(f.port, "/v1/completions", R"({"model":"gpt-9","prompt":"x"})");
    CHECK(unknown_model.result_int() == 404);
    CHECK(parse_obj(unknown_model.body()).at("error").at("param") == "model");
    CHECK(call(f.port, http::verb::get, "/nope").result_int() == 404);
    CHECK(call(f.port, http::verb::get, "/v1/completions").result_int() == 405);

    auto big = post(f.port, "/v1/completions", R"({"prompt":")" + std::string(4096, 'x') + R"("})");
    CHECK(big.result_int() == 413);
    CHECK(error_code_of(big) == "payload_too_large");

    f.engine.submit_failure = status::queue_full;
    auto busy = post(f.port, "/v1/completions", R"({"prompt":"x"})");
    CHECK(busy.result_int() == 429);
    CHECK(busy[http::field::retry_after] == "1");
    CHECK(error_code_of(busy) == "queue_full");
    f.engine.submit_failure.reset();

    f.engine.final_reason = actors::finish_reason::timeout;
    auto late = post(f.port, "/v1/completions", R"({"prompt":"x","max_tokens":2})");
    CHECK(late.result_int() == 504);
    CHECK(error_code_of(late) == "deadline_exceeded");
    f.engine.final_reason = actors::finish_reason::length;

    CHECK(call(f.port, http::verb::get, "/ready").result_int() == 200);
    f.server->drain();
    CHECK(f.engine.drained);
    CHECK(call(f.port, http::verb::get, "/ready").result_int() == 503);
    auto drained = post(f.port, "/v1/completions", R"({"prompt":"x"})");
    CHECK(drained.result_int() == 503);
    CHECK(drained[http::field::retry_after] == "1");
    // While draining every answer ends its connection, so kept-alive connections wind down.
    CHECK_FALSE(drained.keep_alive());
    CHECK_FALSE(call(f.port, http::verb::get, "/health").keep_alive());
    f.server->resume();
    CHECK(call(f.port, http::verb::get, "/ready").result_int() == 200);
    f.engine.ready = false;
    CHECK(post(f.port, "/v1/completions", R"({"prompt":"x"})").result_int() == 503);
}

TEST_CASE("API key: 401 without it, /health and /ready stay open") {
    net::server_options o;
    o.api_key = "sekret";
    server_fixture f(o);
    auto r = post(f.port, "/v1/completions", R"({"prompt":"x","max_tokens":1})");
    CHECK(r.result_int() == 401);
    CHECK(parse_obj(r.body()).at("error").at("type") == "authentication_error");
    CHECK(post(f.port, "/v1/completions", R"({"prompt":"x","max_tokens":1})", {{"Authorization", "Bearer wrong"}})
              .result_int() == 401);
    CHECK(post(f.port, "/v1/completions", R"({"prompt":"x","max_tokens":1})", {{"Authorization", "Bearer sekret"}})
              .result_int() == 200);
    CHECK(call(f.port, http::verb::get, "/v1/models").result_int() == 401);
    CHECK(call(f.port, http::verb::get, "/health").result_int() == 200);
    CHECK(call(f.port, http::verb::get, "/ready").result_int() == 200);
}

TEST_CASE("Models, tokenize, detokenize, health") {
    server_fixture f;
    auto m = parse_obj(call(f.port, http::verb::get, "/v1/models").body());
    CHECK(m.at("data").at(0).at("id") == "fake-model");
    auto t = post(f.port, "/tokenize", R"({"prompt":"AB"})");
    REQUIRE(t.result_int() == 200);
    CHECK(parse_obj(t.body()).at("tokens") == json::array{65, 66});
    auto d = post(f.port, "/detokenize", R"({"tokens":[72,105]})");
    REQUIRE(d.result_int() == 200);
    CHECK(parse_obj(d.body()).at("prompt") == "Hi");
    CHECK(parse_obj(post(f.port, "/detokenize", R"({"tokens":[1,"x"]})").body()).at("error").at("param") ==
          "tokens[1]");
    CHECK(parse_obj(call(f.port, http::verb::get, "/health").body()).at("status") == "ok");
}

TEST_CASE("Keep-alive connection serves several requests") {
    server_fixture f;
    asio::io_context ioc;
    auto s = connect(ioc, f.port);
    beast::flat_buffer buf;
    for (int i = 0; i < 3; ++i) {
        http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
        req.set(http::field::host, "x");
        req.body() = R"({"prompt":"x","max_tokens":2,"stream":true})";
        req.prepare_payload();
        http::write(s, req);
        http::response<http::string_body> res;
        http::read(s, buf, res);
        CHECK(res.result_int() == 200);
        CHECK(sse_events(res.body())->back() == "[DONE]");
    }
}

TEST_CASE("Client disconnect cancels the request") {
    server_fixture f;
    f.engine.gate_open = false;  // the request stays in flight until cancelled
    for (bool stream : {true, false}) {
        asio::io_context ioc;
        auto s = connect(ioc, f.port);
        http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
        req.set(http::field::host, "x");
        req.body() = std::string(R"({"prompt":"x","max_tokens":50,"stream":)") + (stream ? "true" : "false") + "}";
        req.prepare_payload();
        http::write(s, req);
        const auto before = f.engine.cancels().size();
        REQUIRE(wait_until([&] { return f.engine.in_flight() == 1; }));
        s.close();
        REQUIRE(wait_until([&] { return f.engine.cancels().size() == before + 1; }));
        auto sub = f.engine.submitted();
        CHECK(f.engine.cancels().back() == sub.back().id);
        REQUIRE(wait_until([&] { return f.engine.in_flight() == 0; }));
    }
}

TEST_CASE("Timing log has one joinable line per request") {
    auto path = std::filesystem::temp_directory_path() / ("calserve-timing-" + std::to_string(::getpid()) + ".jsonl");
    std::filesystem::remove(path);
    {
        net::server_options o;
        o.timing_log = path.string();
        server_fixture f(o);
        auto r = post(f.port, "/v1/completions", R"({"prompt":"abc","max_tokens":3,"stream":true})");
        REQUIRE(r.result_int() == 200);
        auto id = parse_obj(sse_events(r.body())->front()).at("id").as_string();
        REQUIRE(wait_until([&] { return std::filesystem::exists(path) && std::filesystem::file_size(path) > 0; }));
        std::ifstream in(path);
        std::string line;
        std::getline(in, line);
        auto rec = parse_obj(line);
        CHECK(rec.at("id") == id);
        CHECK(rec.at("prompt_tokens") == 3);
        CHECK(rec.at("completion_tokens") == 3);
        CHECK(rec.at("finish_reason") == "length");
        CHECK(rec.at("ttft_s").as_double() >= 0);
    }
    std::filesystem::remove(path);
}

TEST_CASE("Every status maps to an HTTP error code in one place") {
    for (auto s : all_statuses) {
        auto m = net::map_status(s);
        if (s == status::ok) continue;
        CHECK(m.http_status >= 400);
        CHECK_FALSE(m.type.empty());
    }
    CHECK(net::map_status(status::context_overflow).http_status == 400);
    CHECK(net::map_status(status::unauthorized).http_status == 401);
    CHECK(net::map_status(status::not_found).http_status == 404);
    CHECK(net::map_status(status::payload_too_large).http_status == 413);
    CHECK(net::map_status(status::overloaded).http_status == 429);
    CHECK(net::map_status(status::kv_full).retry_after);
    CHECK(net::map_status(status::device_dead).http_status == 503);
    CHECK(net::map_status(status::deadline_exceeded).http_status == 504);
    CHECK(net::map_status(status::internal).http_status == 500);
}

TEST_CASE("Injected client_stall: a stalled SSE consumer overflows and is cancelled, a vanished one is cancelled") {
    std::atomic<int> mode{1};  // 1 = stall 20 ms per write, 0 = vanish
    net::server_options o;
    o.write_queue = 4;
    o.client_stall = [&mode](const std::string&) -> std::optional<double> { return mode.load() ? 20.0 : 0.0; };
    server_fixture f(o);
    auto r = post(f.port, "/v1/completions", R"({"prompt":"x","max_tokens":200,"stream":true})");
    REQUIRE(r.result_int() == 200);
    auto events = sse_events(r.body());
    REQUIRE(events.has_value());
    CHECK(events->back() == "[DONE]");
    CHECK(r.body().find("queue_full") != std::string::npos);
    REQUIRE(f.engine.cancels().size() == 1);

    mode = 0;
    f.engine.gate_open = false;
    asio::io_context ioc;
    auto s = connect(ioc, f.port);
    http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
    req.set(http::field::host, "x");
    req.body() = R"({"prompt":"x","max_tokens":3,"stream":true})";  // fits the queue: no overflow
    req.prepare_payload();
    http::write(s, req);
    REQUIRE(wait_until([&] { return f.engine.submitted().size() == 2; }));
    f.engine.gate_open = true;
    REQUIRE(wait_until([&] { return f.engine.cancels().size() == 2; }));
    CHECK(f.engine.cancels().back() == f.engine.submitted().back().id);
    // The server closed the connection instead of finishing the response.
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    beast::error_code ec;
    http::read(s, buf, res, ec);
    CHECK(ec);
}

TEST_CASE("Range errors state the range and the value") {
    server_fixture f;
    auto r = post(f.port, "/v1/completions", R"({"prompt":"x","temperature":2.5})");
    CHECK(parse_obj(r.body()).at("error").at("message") == "temperature: must be in [0, 2], got 2.5");
    auto p = post(f.port, "/v1/completions", R"({"prompt":"x","top_p":0})");
    CHECK(parse_obj(p.body()).at("error").at("message") == "top_p: must be in (0, 1], got 0");
}
