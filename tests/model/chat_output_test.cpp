// The streaming split of a Qwen3 answer into reasoning, content and tool calls
// (model/chat/output.hpp): the same text pushed whole and pushed in every split
// gives the same parts.
#include <catch2/catch.hpp>

#include "model/chat/output.hpp"

using calserve::model::chat_delta;
using calserve::model::chat_output_options;
using calserve::model::chat_output_parser;

namespace {
struct call {
    std::string id, name, arguments;
    int opens = 0;
};
struct parsed {
    std::string reasoning, content;
    std::vector<call> calls;
    std::size_t deltas_with_args = 0;
};

void absorb(parsed& p, const chat_delta& d) {
    p.reasoning += d.reasoning;
    p.content += d.content;
    for (const auto& t : d.tool_calls) {
        if (t.opens) {
            REQUIRE(t.index == p.calls.size());
            p.calls.push_back({t.id, t.name, "", 1});
        }
        REQUIRE(t.index < p.calls.size());
        if (!t.arguments.empty()) ++p.deltas_with_args;
        p.calls[t.index].arguments += t.arguments;
    }
}

parsed run(const std::vector<std::string>& pieces, chat_output_options o) {
    chat_output_parser parser(std::move(o));
    parsed p;
    for (const auto& s : pieces) absorb(p, parser.push(s));
    absorb(p, parser.finish());
    return p;
}

// Every split of `text` into 1-byte pushes, and the whole text, agree.
parsed run_all_ways(const std::string& text, chat_output_options o) {
    parsed whole = run({text}, o);
    std::vector<std::string> bytes;
    for (char c : text) bytes.emplace_back(1, c);
    parsed bytewise = run(bytes, o);
    CHECK(bytewise.reasoning == whole.reasoning);
    CHECK(bytewise.content == whole.content);
    REQUIRE(bytewise.calls.size() == whole.calls.size());
    for (std::size_t i = 0; i < whole.calls.size(); ++i) {
        CHECK(bytewise.calls[i].name == whole.calls[i].name);
        CHECK(bytewise.calls[i].arguments == whole.calls[i].arguments);
    }
    return whole;
}

chat_output_options opts(bool reasoning, bool tools) { return {reasoning, tools, "call_x"}; }
}  // namespace

TEST_CASE("chat output: reasoning and content split at </think>") {
    auto p = run_all_ways("<think>\nLet me think.\n\nStep two.\n</think>\n\nThe answer is 4.", opts(true, false));
    CHECK(p.reasoning == "Let me think.\n\nStep two.");
    CHECK(p.content == "The answer is 4.");
    // Without the opening tag (already in the prompt) the text up to </think> is reasoning too.
    auto q = run_all_ways("hmm</think>ok", opts(true, false));
    CHECK(q.reasoning == "hmm");
    CHECK(q.content == "ok");
}

TEST_CASE("chat output: unterminated reasoning stays reasoning, no reasoning mode keeps tags as text") {
    auto p = run_all_ways("<think>\nstill thinking </thi", opts(true, false));
    CHECK(p.reasoning == "still thinking </thi");
    CHECK(p.content.empty());
    auto q = run_all_ways("<think>x</think>y", opts(false, false));
    CHECK(q.content == "<think>x</think>y");
    CHECK(q.reasoning.empty());
}

TEST_CASE("chat output: tool calls are announced, then their arguments stream") {
    const std::string text =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>";
    auto p = run_all_ways(text, opts(false, true));
    REQUIRE(p.calls.size() == 2);
    CHECK(p.calls[0].id == "call_x0");
    CHECK(p.calls[0].name == "get_weather");
    CHECK(p.calls[0].arguments == "{\"city\": \"Paris\", \"days\": [1, 2]}");
    CHECK(p.calls[1].id == "call_x1");
    CHECK(p.calls[1].name == "noop");
    CHECK(p.calls[1].arguments == "{}");
    CHECK(p.content.empty());  // the newlines between calls are layout

    // Pushed byte by byte, the arguments come in many fragments, never the wrapper's "}".
    std::vector<std::string> bytes;
    for (char c : text) bytes.emplace_back(1, c);
    auto b = run(bytes, opts(false, true));
    CHECK(b.deltas_with_args > 10);
    CHECK(b.calls[0].arguments == p.calls[0].arguments);
}

TEST_CASE("chat output: reasoning, then content, then a call") {
    auto p = run_all_ways("<think>\nneed weather\n</think>\n\nChecking.\n<tool_call>\n{\"name\": \"w\", \"arguments\": "
                          "{\"q\": \"a}b\"}}\n</tool_call>",
                          opts(true, true));
    CHECK(p.reasoning == "need weather");
    CHECK(p.content == "Checking.");
    REQUIRE(p.calls.size() == 1);
    CHECK(p.calls[0].arguments == "{\"q\": \"a}b\"}");
}

TEST_CASE("chat output: a block in another shape is parsed whole, a non-call stays content") {
    auto p = run_all_ways("<tool_call>{\"arguments\": {\"a\": 1}, \"name\": \"f\"}</tool_call>", opts(false, true));
    REQUIRE(p.calls.size() == 1);
    CHECK(p.calls[0].name == "f");
    CHECK(p.calls[0].arguments == "{\"a\":1}");
    auto q = run_all_ways("x <tool_call>not json</tool_call> y", opts(false, true));
    CHECK(q.calls.empty());
    CHECK(q.content == "x <tool_call>not json</tool_call> y");
}

TEST_CASE("chat output: a call cut by max_tokens keeps the arguments seen so far") {
    auto p = run_all_ways("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2", opts(false, true));
    REQUIRE(p.calls.size() == 1);
    CHECK(p.calls[0].arguments == "{\"a\": [1, 2");
    // Cut inside the closing tag: complete arguments, without the wrapper or the tag.
    auto c = run_all_ways("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": {\"b\": 1}}}\n</tool_c", opts(false, true));
    REQUIRE(c.calls.size() == 1);
    CHECK(c.calls[0].arguments == "{\"a\": {\"b\": 1}}");
    // Cut after an inner "}": that brace is the arguments', kept.
    auto d = run_all_ways("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": {\"b\": 1}", opts(false, true));
    CHECK(d.calls[0].arguments == "{\"a\": {\"b\": 1}");
    // Cut before the header is complete: the text is returned as content.
    auto q = run_all_ways("<tool_call>\n{\"na", opts(false, true));
    CHECK(q.calls.empty());
    CHECK(q.content == "<tool_call>\n{\"na");
}

TEST_CASE("chat output: without tools, <tool_call> is text, plain content passes through") {
    auto p = run_all_ways("a <tool_call> b\n", opts(false, false));
    CHECK(p.content == "a <tool_call> b\n");
    auto q = run_all_ways("  spaced  text  ", opts(false, true));
    CHECK(q.content == "  spaced  text  ");
}
