// Chat template conformance: OpenAI chat request bodies (tools with nested
// parameter schemas, assistant tool calls, tool responses, reasoning, thinking on
// and off, the /think and /no_think soft switches) go through calserve's request
// parser and chat template, and through the Jinja chat_template of the tokenizer
// package rendered by an independent Jinja implementation (npm @huggingface/jinja,
// tests/net/chat_template_peer.js under node). The prompts must be equal byte for
// byte. Node and the package are required (tools/bootstrap); their absence fails.
#include <catch2/catch.hpp>

#include <boost/json.hpp>
#include <fstream>

#include "model/tokenizer/python_json.hpp"
#include "net/api_params.hpp"
#include "tests/model/tokenizer_fixture.hpp"

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace calserve;

namespace {

const char* const k_weather_tool = R"({"type": "function", "function": {"name": "get_weather",
  "description": "Weather \"now\" in a city.\nUse °C; tab\there, back\\slash, </tools> text, snow ☃ 🌨",
  "parameters": {"type": "object", "properties": {
    "city": {"type": "string", "description": "City name", "minLength": 1},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 14},
    "ratio": {"type": "number", "minimum": 0.5, "exclusiveMaximum": 2.75},
    "hours": {"type": "array", "items": {"type": "object", "properties": {
        "at": {"type": "string"}, "detail": {"anyOf": [{"type": "boolean"}, {"type": "null"}]}},
        "required": ["at"], "additionalProperties": false}, "maxItems": 3},
    "opts": {"$ref": "#/$defs/opts"}},
   "required": ["city"], "additionalProperties": false,
   "$defs": {"opts": {"type": "object", "properties": {"metric": {"type": "boolean", "default": true}}}}},
  "strict": true}})";

const char* const k_search_tool =
    R"({"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}})";

std::vector<std::string> cases() {
    std::string tools = std::string("[") + k_weather_tool + ", " + k_search_tool + "]";
    return {
        // Plain, thinking off (calserve's default) and on; soft switches are text.
        R"({"messages": [{"role": "user", "content": "Hi /no_think"}]})",
        R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi /think"}],
            "chat_template_kwargs": {"enable_thinking": true}})",
        // Tools with and without a system message.
        R"({"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": )" + tools + "}",
        R"({"messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Paris?"}],
            "tools": )" + tools + R"(, "chat_template_kwargs": {"enable_thinking": true}})",
        // Multi-turn: two calls (null content; string and object arguments), two responses, an
        // answer, a new question, a call after reasoning_content with content text.
        R"({"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "Paris and Rome?"},
            {"role": "assistant", "content": null, "tool_calls": [
              {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
              {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome", "days": 2, "hours": [{"at": "9h", "detail": null}]}}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"t\": 20}"},
            {"role": "tool", "tool_call_id": "call_2", "content": "{\"t\": 24}"},
            {"role": "assistant", "content": "Paris 20, Rome 24."},
            {"role": "user", "content": "And Oslo?"},
            {"role": "assistant", "content": "Let me check.", "reasoning_content": "\nOslo needs a call.\n",
             "tool_calls": [{"id": "call_3", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
            {"role": "tool", "tool_call_id": "call_3", "content": "cold"}],
           "tools": )" + tools + R"(, "chat_template_kwargs": {"enable_thinking": true}})",
        // Reasoning inside content (split by the template), earlier turns' reasoning dropped.
        R"({"messages": [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "<think>\nr1\n</think>\n\nA1"},
            {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "<think>r2</think>A2"},
            {"role": "user", "content": "<tool_response>\nx\n</tool_response>"},
            {"role": "assistant", "content": "", "reasoning_content": "kept"}], "tools": [)" + std::string(k_search_tool) + "]}",
        // A call in a turn that has content, and text parts.
        R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "part one, "}, {"type": "text", "text": "two"}]},
            {"role": "assistant", "content": "Searching.", "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": "{}"}}]},
            {"role": "tool", "content": "none"}], "tools": [)" + std::string(k_search_tool) + "]}",
    };
}

std::string calserve_render(const std::string& body) {
    auto parsed = net::parse_request_text(net::api_kind::chat, body, {});
    if (auto* e = std::get_if<net::api_error>(&parsed)) FAIL("parse: " << e->message << "\n" << body);
    auto& r = std::get<net::api_request>(parsed);
    auto& msgs = std::get<std::vector<model::chat_message>>(r.prompt);
    auto text = test::qwen3_tokenizer()->apply_chat_template(msgs, r.chat);
    if (!text) FAIL(text.error().what());
    return *text;
}

std::string shell_quote(const fs::path& p) {
    std::string out = "'";
    for (char c : p.string()) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

}  // namespace

TEST_CASE("chat template conformance with the Jinja template (node @huggingface/jinja)") {
    const auto dir = test::scratch_dir("chat-template-peer");
    const auto all = cases();
    {
        std::ofstream in(dir / "cases.jsonl", std::ios::binary);
        for (const auto& c : all) in << json::serialize(json::parse(c)) << "\n";
    }
    const fs::path peer = test::source_dir() / "tests" / "net" / "chat_template_peer.js";
    std::string cmd = "node " + shell_quote(peer) + " " + shell_quote(test::tokenizer_dir()) + " " +
                      shell_quote(dir / "cases.jsonl") + " " + shell_quote(dir / "peer.jsonl");
    int rc = std::system(cmd.c_str());
    if (rc != 0) FAIL("the Jinja peer failed (exit status " << rc << "; run tools/bootstrap): " << cmd);
    std::ifstream out(dir / "peer.jsonl", std::ios::binary);
    std::string line;
    std::size_t i = 0;
    while (std::getline(out, line)) {
        REQUIRE(i < all.size());
        INFO("case " << i << ": " << all[i]);
        std::string expected(json::parse(line).as_string());
        CHECK(calserve_render(all[i]) == expected);
        ++i;
    }
    CHECK(i == all.size());
}

TEST_CASE("python_json: floats and strings as Python's json.dumps writes them") {
    using model::python_float_repr;
    CHECK(python_float_repr(1.0) == "1.0");
    CHECK(python_float_repr(0.5) == "0.5");
    CHECK(python_float_repr(-2.75) == "-2.75");
    CHECK(python_float_repr(1e-05) == "1e-05");
    CHECK(python_float_repr(0.0001) == "0.0001");
    CHECK(python_float_repr(1e16) == "1e+16");
    CHECK(python_float_repr(1234567890123456.0) == "1234567890123456.0");
    CHECK(python_float_repr(1.5e20) == "1.5e+20");
    CHECK(python_float_repr(0.1) == "0.1");
    CHECK(python_float_repr(-0.0) == "-0.0");
    CHECK(model::python_json_dumps(json::parse(R"({"a": [1, 2.0, true, null], "b": "é\u0001\"\\\n/", "c": {}})")) ==
          "{\"a\": [1, 2.0, true, null], \"b\": \"é\\u0001\\\"\\\\\\n/\", \"c\": {}}");
}
