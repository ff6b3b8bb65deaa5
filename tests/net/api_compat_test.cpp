// Fields other servers accept: implemented or refused by name, never ignored
// (net/api_compat.hpp); the small parsing edges; exact numbers in the answers.
#include <algorithm>
#include <catch2/catch.hpp>

#include "net/api_params.hpp"
#include "net/openai_format.hpp"
#include "tests/net/net_fixture.hpp"

using namespace calserve;
using namespace calserve::test;
using net::api_kind;

namespace {
std::variant<net::api_request, net::api_error> parse(api_kind kind, const std::string& body) {
    return net::parse_request_text(kind, body, {1000});
}

std::string refused_param(api_kind kind, const std::string& body) {
    auto r = parse(kind, body);
    auto* e = std::get_if<net::api_error>(&r);
    return e ? e->param : std::string("(accepted)");
}
}  // namespace

TEST_CASE("Fields accepted elsewhere are implemented or refused with a 400 naming them") {
    struct row {
        api_kind kind;
        std::string body;
        std::string refused;   // "(accepted)" when it is read
    };
    const std::string p = R"("prompt":"hi")";
    const std::string m = R"("messages":[{"role":"user","content":"hi"}])";
    const row table[] = {
        {api_kind::completion, "{" + p + R"(,"echo":true})", "(accepted)"},
        {api_kind::completion, "{" + p + R"(,"echo":"yes"})", "echo"},
        {api_kind::completion, "{" + p + R"(,"echo":true,"stream":true})", "stream"},
        {api_kind::chat, "{" + m + R"(,"echo":true})", "echo"},
        {api_kind::completion, "{" + p + R"(,"echo":false})", "(accepted)"},
        {api_kind::completion, "{" + p + R"(,"echo":null})", "(accepted)"},
        {api_kind::completion, "{" + p + R"(,"best_of":3})", "best_of"},
        {api_kind::completion, "{" + p + R"(,"best_of":2,"n":2})", "(accepted)"},
        {api_kind::completion, "{" + p + R"(,"best_of":1})", "(accepted)"},
        {api_kind::completion, "{" + p + R"(,"suffix":"end"})", "suffix"},
        {api_kind::completion, "{" + p + R"(,"suffix":""})", "(accepted)"},
        {api_kind::completion, "{" + p + R"(,"prompt_logprobs":1})", "(accepted)"},
        {api_kind::chat, "{" + m + R"(,"prompt_logprobs":0})", "(accepted)"},
        {api_kind::chat, "{" + m + R"(,"prompt_logprobs":-1})", "prompt_logprobs"},
        {api_kind::chat, "{" + m + R"(,"prompt_logprobs":21})", "prompt_logprobs"},
        {api_kind::chat, "{" + m + R"(,"prompt_logprobs":true})", "prompt_logprobs"},
        {api_kind::chat, "{" + m + R"(,"prompt_logprobs":2,"stream":true})", "stream"},
        {api_kind::chat, "{" + m + R"(,"continue_final_message":true})", "continue_final_message"},
        {api_kind::chat, "{" + m + R"(,"continue_final_message":false})", "(accepted)"},
        {api_kind::chat, "{" + m + R"(,"add_generation_prompt":"no"})", "add_generation_prompt"},
        {api_kind::chat, "{" + m + R"(,"stream":true,"stream_options":{"continuous_usage_stats":true}})",
         "stream_options.continuous_usage_stats"},
        {api_kind::chat, "{" + m + R"(,"stream":true,"stream_options":{"continuous_usage_stats":false}})", "(accepted)"},
        {api_kind::completion, "{" + p + R"(,"max_tokens":0})", "max_tokens"},
        {api_kind::completion, "{" + p + R"(,"max_tokens":0,"echo":true,"logprobs":1})", "(accepted)"},
        {api_kind::chat, "{" + m + R"(,"max_completion_tokens":0})", "max_tokens"},
        {api_kind::chat, "{" + m + R"(,"max_completion_tokens":0,"prompt_logprobs":1})", "(accepted)"},
        {api_kind::completion, "{" + p + R"(,"cache_salt":""})", "cache_salt"},
        {api_kind::completion, "{" + p + R"(,"cache_salt":null})", "(accepted)"},
        {api_kind::completion, "{" + p + R"(,"logit_bias":{" 5":1}})", "logit_bias. 5"},
        {api_kind::completion, "{" + p + R"(,"logit_bias":{"5 ":1}})", "logit_bias.5 "},
        {api_kind::completion, "{" + p + R"(,"logit_bias":{"+5":1}})", "logit_bias.+5"},
        {api_kind::completion, "{" + p + R"(,"logit_bias":{"5":1}})", "(accepted)"},
    };
    for (const auto& r : table) {
        INFO(r.body);
        CHECK(refused_param(r.kind, r.body) == r.refused);
    }
}

TEST_CASE("add_generation_prompt is read; empty stop strings are ignored in both forms") {
    auto chat = parse(api_kind::chat, R"({"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false})");
    REQUIRE(std::holds_alternative<net::api_request>(chat));
    CHECK_FALSE(std::get<net::api_request>(chat).chat.add_generation_prompt);
    for (const char* body : {R"({"prompt":"hi","stop":""})", R"({"prompt":"hi","stop":[""]})",
                             R"({"prompt":"hi","stop":["", "x"]})"}) {
        INFO(body);
        auto r = parse(api_kind::completion, body);
        REQUIRE(std::holds_alternative<net::api_request>(r));
        const auto& stop = std::get<net::api_request>(r).gen.stop;
        CHECK(std::count(stop.begin(), stop.end(), std::string()) == 0);
    }
}

TEST_CASE("n > 1 answers carry each logprob with the bits n = 1 gives it; no number in exponent form", "[net]") {
    server_fixture f;
    f.engine.token_logprob = -3.7369470596313477f;
    for (const char* route : {"/v1/completions", "/v1/chat/completions"}) {
        INFO(route);
        const bool chat = std::string(route).find("chat") != std::string::npos;
        const std::string head = chat ? R"({"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":1)"
                                      : R"({"prompt":"hi","logprobs":1)";
        auto one = post(f.port, route, head + R"(,"max_tokens":3})");
        auto two = post(f.port, route, head + R"(,"max_tokens":3,"n":2})");
        REQUIRE(one.result_int() == 200);
        REQUIRE(two.result_int() == 200);
        for (const auto* body : {&one.body(), &two.body()}) {
            CHECK(body->find("-3.7369470596313477") != std::string::npos);
            CHECK(body->find("-3.736947059631348,") == std::string::npos);
            CHECK(body->find("E0") == std::string::npos);
            CHECK(body->find("E1") == std::string::npos);
        }
        // Counts are integers: usage reads back as int64, never double.
        auto usage = json::parse(two.body()).at("usage").as_object();
        CHECK(usage.at("completion_tokens").is_int64());
    }
}

TEST_CASE("scoring asks the engine for the prompt's scores: echo with logprobs, prompt_logprobs, max_tokens 0") {
    struct row {
        api_kind kind;
        std::string body;
        std::int32_t top;      // gen.score_top_n
        bool score_only;
    };
    const row table[] = {
        {api_kind::completion, R"({"prompt":"hi","echo":true,"logprobs":1,"max_tokens":0})", 1, true},
        {api_kind::completion, R"({"prompt":"hi","echo":true,"logprobs":3})", 3, false},
        {api_kind::completion, R"({"prompt":"hi","echo":true})", -1, false},  // the text only
        {api_kind::completion, R"({"prompt":"hi","echo":true,"logprobs":1,"prompt_logprobs":5})", 5, false},
        {api_kind::chat, R"({"messages":[{"role":"user","content":"hi"}],"prompt_logprobs":0})", 0, false},
        {api_kind::completion, R"({"prompt":"hi","logprobs":2})", -1, false},
    };
    for (const auto& r : table) {
        INFO(r.body);
        auto parsed = parse(r.kind, r.body);
        REQUIRE(std::holds_alternative<net::api_request>(parsed));
        const auto& req = std::get<net::api_request>(parsed);
        CHECK(req.gen.score_top_n == r.top);
        CHECK(req.score_only == r.score_only);
    }
}

TEST_CASE("an lm-eval-harness request scores the prompt: echoed text, null first logprob, no completion", "[net]") {
    server_fixture f;
    // The harness's loglikelihood request: the context + continuation, echoed and scored.
    auto r = post(f.port, "/v1/completions", R"({"prompt":"abcd","echo":true,"logprobs":1,"max_tokens":0,"temperature":0})");
    REQUIRE(r.result_int() == 200);
    auto body = json::parse(r.body()).as_object();
    const auto& choice = body.at("choices").as_array().at(0).as_object();
    CHECK(choice.at("text").as_string() == "abcd");
    CHECK(choice.at("finish_reason").as_string() == "length");
    const auto& lp = choice.at("logprobs").as_object();
    CHECK(lp.at("tokens") == json::parse(R"(["a","b","c","d"])"));
    CHECK(lp.at("token_logprobs") == json::parse("[null,-0.25,-0.5,-0.75]"));
    CHECK(lp.at("top_logprobs") == json::parse(R"([null,{"b":-0.25},{"c":-0.5},{"d":-0.75}])"));
    CHECK(lp.at("text_offset") == json::parse("[0,1,2,3]"));
    const auto& usage = body.at("usage").as_object();
    CHECK(usage.at("prompt_tokens").as_int64() == 4);
    CHECK(usage.at("completion_tokens").as_int64() == 0);
    REQUIRE(!f.engine.submitted().empty());
    CHECK(f.engine.submitted().back().score_top_n == 1);
    CHECK(f.engine.submitted().back().max_tokens == 1);  // one token, generated and dropped

    // echo with a completion: the prompt's entries, then the completion's, offsets past the prompt.
    r = post(f.port, "/v1/completions", R"({"prompt":"ab","echo":true,"logprobs":1,"max_tokens":2})");
    REQUIRE(r.result_int() == 200);
    body = json::parse(r.body()).as_object();
    const auto& c2 = body.at("choices").as_array().at(0).as_object();
    CHECK(c2.at("text").as_string() == "abab");
    CHECK(c2.at("logprobs").at("token_logprobs") == json::parse("[null,-0.25,-0.5,-0.5]"));
    CHECK(c2.at("logprobs").at("text_offset") == json::parse("[0,1,2,3]"));
    CHECK(body.at("usage").at("completion_tokens").as_int64() == 2);
}

TEST_CASE("prompt_logprobs as vLLM lists them: completions in the choice, chat at the top level", "[net]") {
    server_fixture f;
    auto r = post(f.port, "/v1/completions", R"({"prompt":"ab","prompt_logprobs":2,"max_tokens":1})");
    REQUIRE(r.result_int() == 200);
    auto body = json::parse(r.body()).as_object();
    const auto& pl = body.at("choices").as_array().at(0).at("prompt_logprobs");
    CHECK(pl == json::parse(R"([null,{"98":{"logprob":-0.25,"rank":1,"decoded_token":"b"},
                                      "122":{"logprob":-3,"rank":2,"decoded_token":"z"}}])"));
    r = post(f.port, "/v1/chat/completions",
             R"({"messages":[{"role":"user","content":"x"}],"prompt_logprobs":0,"max_completion_tokens":0})");
    REQUIRE(r.result_int() == 200);
    body = json::parse(r.body()).as_object();
    const auto& chat_pl = body.at("prompt_logprobs").as_array();
    CHECK(chat_pl.size() == f.engine.submitted().back().prompt.size());
    CHECK(chat_pl.at(0).is_null());
    CHECK(chat_pl.at(1).as_object().size() == 1);  // the prompt token alone (rank null: no alternatives asked)
    CHECK(chat_pl.at(1).as_object().begin()->value().at("rank").is_null());
    CHECK(body.at("choices").at(0).at("message").at("content").as_string().empty());
}
