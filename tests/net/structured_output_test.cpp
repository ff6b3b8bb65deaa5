// Structured outputs and tools at the API edge: request-field errors naming their
// path, the forced tool-call grammar (accepts exactly the Qwen3 call layout), and
// the OpenAI shapes of parsed answers (reasoning_content, tool_calls, finish reasons)
// in streaming chunks and whole responses.
#include <catch2/catch.hpp>

#include <boost/json.hpp>

#include "net/api_params.hpp"
#include "net/openai_format.hpp"
#include "net/output_constraint.hpp"
#include "tests/model/grammar_fixture.hpp"

namespace json = boost::json;
using namespace calserve;
using net::api_kind;

namespace {
std::string error_param(api_kind kind, const std::string& body) {
    auto r = net::parse_request_text(kind, body, {});
    auto* e = std::get_if<net::api_error>(&r);
    return e ? e->param : std::string("<accepted>");
}

net::api_request parse_ok(const std::string& body) {
    auto r = net::parse_request_text(api_kind::chat, body, {});
    if (auto* e = std::get_if<net::api_error>(&r)) FAIL(e->message);
    return std::get<net::api_request>(r);
}

const std::string k_msgs = R"("messages": [{"role": "user", "content": "hi"}])";
// "{" + the messages field: a body's head that tests complete.
std::string msgs_head() {
    std::string b;
    b.reserve(256);
    b.append("{").append(k_msgs);
    return b;
}
const std::string k_tool =
    R"({"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": false}}})";

// Feeds `text` byte by byte to a matcher over the one-byte vocabulary.
bool grammar_accepts(const std::string& ebnf, const std::string& text) {
    auto g = model::grammar::compile(ebnf, test::byte_vocab());
    if (!g) FAIL(g.error().what() << "\n" << ebnf);
    model::grammar::matcher m(*g);
    for (unsigned char c : text)
        if (!m.accept(c)) return false;
    return m.accepting();
}
}  // namespace

TEST_CASE("structured outputs: request errors name their field") {
    CHECK(error_param(api_kind::chat, msgs_head() + R"(, "response_format": {"type": "xml"}})") == "response_format.type");
    CHECK(error_param(api_kind::chat, msgs_head() + R"(, "response_format": {"type": "json_schema", "json_schema": {"schema": {}}}})") ==
          "response_format.json_schema.name");
    CHECK(error_param(api_kind::chat, msgs_head() + R"(, "tools": [{"type": "retrieval"}]})") == "tools[0].type");
    CHECK(error_param(api_kind::chat, msgs_head() + R"(, "tools": [)" + k_tool + R"(, {"type": "function", "function": {}}]})") ==
          "tools[1].function.name");
    CHECK(error_param(api_kind::chat, msgs_head() + R"(, "tools": [)" + k_tool + R"(, )" + k_tool + "]}") ==
          "tools[1].function.name");
    CHECK(error_param(api_kind::chat, msgs_head() + R"(, "tools": [)" + k_tool +
                                          R"(], "tool_choice": {"type": "function", "function": {"name": "g"}}})") ==
          "tool_choice.function.name");
    CHECK(error_param(api_kind::chat, msgs_head() + R"(, "tool_choice": "required"})") == "tool_choice");
    CHECK(error_param(api_kind::chat, msgs_head() + R"(, "chat_template_kwargs": {"enable_thinking": "yes"}})") ==
          "chat_template_kwargs.enable_thinking");
    CHECK(error_param(api_kind::chat, msgs_head() + R"(, "max_reasoning_tokens": -1})") == "max_reasoning_tokens");
    CHECK(error_param(api_kind::completion, R"({"prompt": "x", "tools": [)" + k_tool + "]}") == "tools");
    CHECK(error_param(api_kind::chat, R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"function": {}}]}]})") ==
          "messages[0].tool_calls[0].function.name");
    CHECK(error_param(api_kind::chat, R"({"messages": [{"role": "assistant", "content": null}]})") == "messages[0].content");
    // Accepted: a call-only assistant turn, json_object on completions, a named choice.
    CHECK(error_param(api_kind::chat, R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}]})") ==
          "<accepted>");
    CHECK(error_param(api_kind::completion, R"({"prompt": "x", "response_format": {"type": "json_object"}})") == "<accepted>");
    auto r = parse_ok(msgs_head() + R"(, "tools": [)" + k_tool + R"(], "tool_choice": {"type": "function", "function": {"name": "f"}},
                       "chat_template_kwargs": {"enable_thinking": true}, "max_reasoning_tokens": 7})");
    CHECK(r.output.tool_choice == net::tool_choice_kind::named);
    CHECK(r.output.enable_thinking);
    CHECK(r.chat.enable_thinking);
    CHECK(r.output.max_reasoning_tokens == 7);
    REQUIRE(r.chat.tools_json.size() == 1);
    CHECK(r.chat.tools_json[0].starts_with("{\"type\": \"function\", \"function\": {\"name\": \"f\""));
}

TEST_CASE("structured outputs: the forced tool-call grammar is the template's call layout") {
    auto r = parse_ok(msgs_head() + R"(, "tools": [)" + k_tool +
                      R"(, {"type": "function", "function": {"name": "g"}}], "tool_choice": "required"})");
    auto ebnf = net::tool_call_ebnf(r.output);
    REQUIRE(ebnf);
    const std::string f = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\":12}}\n</tool_call>";
    const std::string g = "<tool_call>\n{\"name\": \"g\", \"arguments\": {\"x\":[true]}}\n</tool_call>";
    CHECK(grammar_accepts(*ebnf, f));
    CHECK(grammar_accepts(*ebnf, f + "\n" + g));
    CHECK_FALSE(grammar_accepts(*ebnf, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"b\":1}}\n</tool_call>"));
    CHECK_FALSE(grammar_accepts(*ebnf, "<tool_call>\n{\"name\": \"h\", \"arguments\": {}}\n</tool_call>"));
    CHECK_FALSE(grammar_accepts(*ebnf, ""));
    // Named: exactly one call of that function.
    r.output.tool_choice = net::tool_choice_kind::named;
    r.output.tool_name = std::string(1, 'g');
    auto named = net::tool_call_ebnf(r.output);
    REQUIRE(named);
    CHECK(grammar_accepts(*named, g));
    CHECK_FALSE(grammar_accepts(*named, f));
    CHECK_FALSE(grammar_accepts(*named, g + "\n" + g));
    // A bad parameters schema names its tool.
    r.output.tools[1].parameters_json = R"({"type": "object", "properties": {"a": {"not": {}}}})";
    auto bad = net::tool_call_ebnf(r.output);
    REQUIRE_FALSE(bad);
    CHECK_THAT(bad.error().message, Catch::StartsWith("tools[1].function.parameters: "));
    CHECK_THAT(bad.error().message, Catch::Contains("/properties/a"));
}

TEST_CASE("structured outputs: prefix_rules renames rules, not literals or classes") {
    CHECK(net::prefix_rules("root ::= item (\",\" item)* # a comment\nitem ::= [a-z_]+ \"root\"", "p-") ==
          "p-root ::= p-item (\",\" p-item)* # a comment\np-item ::= [a-z_]+ \"root\"");
    CHECK(net::prefix_rules(R"(root ::= "a\"b" x)", "t0-") == R"(t0-root ::= "a\"b" t0-x)");
}

namespace {
actors::generated_token tok(std::string text) { return actors::generated_token{1, std::move(text), 0, {}}; }

std::vector<json::object> stream_chunks(const std::vector<std::string>& pieces, actors::finish_reason reason,
                                        bool reasoning) {
    net::response_builder b(api_kind::chat, "chatcmpl-abc", "m", false, {}, nullptr);
    b.parse_output(reasoning, true);
    std::vector<json::object> out;
    for (const auto& p : pieces) {
        auto c = b.token_chunk(tok(p));
        if (!c.empty()) out.push_back(json::parse(c).as_object());
    }
    actors::generation_result r;
    r.reason = reason;
    out.push_back(json::parse(b.finish_chunk(r)).as_object());
    return out;
}
}  // namespace

TEST_CASE("structured outputs: streamed tool calls as OpenAI sends them") {
    std::vector<std::string> pieces{"<tool_call>", "\n{\"name\": \"", "f", "\", \"arguments\": ", "{\"a\":", "12", "}}",
                                    "\n</tool_call>"};
    auto chunks = stream_chunks(pieces, actors::finish_reason::stop, false);
    std::string args;
    int opened = 0;
    for (const auto& c : chunks) {
        const auto& delta = c.at("choices").at(0).at("delta").as_object();
        CHECK_FALSE(delta.contains("content"));
        if (!delta.contains("tool_calls")) continue;
        for (const auto& t : delta.at("tool_calls").as_array()) {
            const auto& o = t.as_object();
            CHECK(o.at("index").as_int64() == 0);
            if (o.contains("id")) {
                ++opened;
                CHECK(o.at("id").as_string() == "call_abc_0");
                CHECK(o.at("type").as_string() == "function");
                CHECK(o.at("function").at("name").as_string() == "f");
            }
            args += o.at("function").at("arguments").as_string();
        }
    }
    CHECK(opened == 1);
    CHECK(args == "{\"a\":12}");
    CHECK(chunks.back().at("choices").at(0).at("finish_reason").as_string() == "tool_calls");
    // Cut by max_tokens: the finish says length, never tool_calls.
    auto cut = stream_chunks({"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\":"}, actors::finish_reason::length, false);
    CHECK(cut.back().at("choices").at(0).at("finish_reason").as_string() == "length");
}

TEST_CASE("structured outputs: whole responses carry reasoning_content and tool_calls") {
    net::response_builder b(api_kind::chat, "chatcmpl-abc", "m", false, {}, nullptr);
    b.parse_output(true, true);
    for (std::string p : {"<think>\nweigh", " it\n</think>\n\n", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"})
        b.add_token(tok(p));
    actors::generation_result r;
    r.reason = actors::finish_reason::stop;
    auto o = json::parse(b.final_response(r)).as_object();
    const auto& choice = o.at("choices").at(0).as_object();
    const auto& m = choice.at("message").as_object();
    CHECK(choice.at("finish_reason").as_string() == "tool_calls");
    CHECK(m.at("content").is_null());
    CHECK(m.at("reasoning_content").as_string() == "weigh it");
    CHECK(m.at("tool_calls").at(0).at("function").at("arguments").as_string() == "{}");
    CHECK(m.at("tool_calls").at(0).at("function").at("name").as_string() == "f");

    // Thinking without tools: reasoning apart from content, streamed as reasoning_content.
    net::response_builder s(api_kind::chat, "chatcmpl-abc", "m", false, {}, nullptr);
    s.parse_output(true, false);
    std::string reasoning, content;
    for (std::string p : {"<think>", "\nhm", "</think>", "\n\nyes"}) {
        auto c = s.token_chunk(tok(p));
        if (c.empty()) continue;
        const auto v = json::parse(c);
        const auto& d = v.at("choices").at(0).at("delta").as_object();
        if (d.contains("reasoning_content")) reasoning += d.at("reasoning_content").as_string();
        if (d.contains("content")) content += d.at("content").as_string();
    }
    CHECK(reasoning == "hm");
    CHECK(content == "yes");
}
