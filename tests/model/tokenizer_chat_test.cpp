// Chat template: exact strings as Qwen3's Jinja chat_template renders them (the
// expected strings follow the template's branches; they were also rendered with
// jinja2 from the tokenizer_config.json in .cache/tokenizer-qwen3).
#include <catch2/catch.hpp>

#include "tests/model/tokenizer_fixture.hpp"

using calserve::model::chat_message;
using calserve::test::qwen3_tokenizer;
using msgs = std::vector<chat_message>;

namespace {
std::string render(const msgs& m, bool add_generation_prompt, bool enable_thinking) {
    auto r = qwen3_tokenizer()->apply_chat_template(m, add_generation_prompt, enable_thinking);
    if (!r) FAIL(r.error().what());
    return *r;
}
}  // namespace

TEST_CASE("chat template: generation prompt with and without thinking") {
    msgs m{{"user", "Hi"}};
    CHECK(render(m, true, false) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    CHECK(render(m, true, true) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    CHECK(render(m, false, false) == "<|im_start|>user\nHi<|im_end|>\n");
    // The default is thinking disabled.
    CHECK(*qwen3_tokenizer()->apply_chat_template(m, true) == render(m, true, false));
}

TEST_CASE("chat template: system, history and later system messages") {
    CHECK(render({{"system", "You are helpful."}, {"user", "Hi"}}, false, false) ==
          "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
    CHECK(render({{"system", "S"}, {"user", "Q1"}, {"assistant", "A1"}, {"user", "Q2"}}, true, false) ==
          "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
          "<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    CHECK(render({{"system", "S1"}, {"user", "u"}, {"system", "S2"}}, true, false) ==
          "<|im_start|>system\nS1<|im_end|>\n<|im_start|>user\nu<|im_end|>\n<|im_start|>system\nS2<|im_end|>\n"
          "<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST_CASE("chat template: assistant turns after the last query carry a think block") {
    // The final assistant turn after the last user query gets an (empty) think block.
    CHECK(render({{"user", "Q1"}, {"assistant", "A1"}}, false, false) ==
          "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nA1<|im_end|>\n");
    // Reasoning in earlier turns is dropped; in the last one it is kept.
    CHECK(render({{"user", "Q1"}, {"assistant", "<think>\nplan\n</think>\n\nA1"}, {"user", "Q2"},
                  {"assistant", "<think>\nr2\n</think>\n\nA2"}},
                 false, false) ==
          "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
          "<|im_start|>assistant\n<think>\nr2\n</think>\n\nA2<|im_end|>\n");
}

TEST_CASE("chat template: tool messages are grouped into one user turn") {
    CHECK(render({{"user", "weather?"}, {"assistant", "calling"}, {"tool", "{\"t\": 20}"}, {"tool", "{\"h\": 5}"},
                  {"assistant", "It is 20C."}},
                 false, false) ==
          "<|im_start|>user\nweather?<|im_end|>\n<|im_start|>assistant\ncalling<|im_end|>\n"
          "<|im_start|>user\n<tool_response>\n{\"t\": 20}\n</tool_response>\n<tool_response>\n{\"h\": 5}\n"
          "</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nIt is 20C.<|im_end|>\n");
    // A user message that is a wrapped tool response is not a query.
    CHECK(render({{"user", "q"}, {"tool", "r1"}, {"user", "<tool_response>\nx\n</tool_response>"},
                  {"assistant", "<think>why</think>ans"}},
                 true, true) ==
          "<|im_start|>user\nq<|im_end|>\n<|im_start|>user\n<tool_response>\nr1\n</tool_response><|im_end|>\n"
          "<|im_start|>user\n<tool_response>\nx\n</tool_response><|im_end|>\n"
          "<|im_start|>assistant\n<think>\nwhy\n</think>\n\nans<|im_end|>\n<|im_start|>assistant\n");
}

TEST_CASE("chat template: rejects an empty conversation and unknown roles") {
    auto tok = qwen3_tokenizer();
    CHECK(tok->apply_chat_template(msgs{}, true).code() == calserve::status::invalid_argument);
    auto r = tok->apply_chat_template(msgs{{"wizard", "x"}}, true);
    CHECK(r.code() == calserve::status::invalid_argument);
    CHECK_THAT(r.error().message, Catch::Contains("wizard"));
}

TEST_CASE("chat template output tokenizes with the special tokens as single ids") {
    auto tok = qwen3_tokenizer();
    auto text = render({{"system", "S"}, {"user", "Hi"}}, true, false);
    auto ids = calserve::test::encode_ok(*tok, text);
    CHECK(ids.front() == 151644);
    CHECK(std::count(ids.begin(), ids.end(), 151645) == 2);
    CHECK(std::count(ids.begin(), ids.end(), 151667) == 1);  // <think>
    CHECK(std::count(ids.begin(), ids.end(), 151668) == 1);  // </think>
    CHECK(*tok->decode(ids) == text);
}
