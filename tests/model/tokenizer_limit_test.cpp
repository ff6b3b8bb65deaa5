// The tokenizer's length bounds, which the server uses to refuse prompts that
// cannot fit without tokenizing them in full (docs/tokenizer.md, "Length bounds"):
//  - encode(text, max) equals encode(text) when it fits, and answers
//    context_overflow when it does not, whatever the text;
//  - max_text_bytes(n) is sound: a text longer than it never encodes to n ids or
//    fewer, including texts that NFC shrinks the most (Kelvin sign -> K, Hangul
//    jamo -> syllables) and texts of the longest tokens.
#include <catch2/catch.hpp>
#include <random>

#include "tests/model/tokenizer_fixture.hpp"

using namespace calserve;
using calserve::test::encode_ok;
using calserve::test::qwen3_tokenizer;

namespace {

std::string repeat(std::string_view s, std::size_t times) {
    std::string out;
    out.reserve(s.size() * times);
    for (std::size_t i = 0; i < times; ++i) out += s;
    return out;
}

std::string longest_token_text(const model::tokenizer& tok) {
    for (model::token_id id = 0; id < tok.vocab_size(); ++id) {
        auto b = tok.token_bytes_view(id);
        if (b.size() == tok.max_token_bytes() && !tok.is_special(id)) return std::string(b);
    }
    return {};
}

}  // namespace

TEST_CASE("tokenizer encode with a limit equals encode when the text fits, else context_overflow") {
    auto tok = qwen3_tokenizer();
    const std::vector<std::string> texts{
        "Hello, world! <|im_start|>user\nHow are you?<|im_end|>", repeat("The quick brown fox. ", 40),
        "Grüße aus Köln — 東京 🚀 " + repeat("ab", 30), repeat("\xE2\x84\xAA", 50)};
    for (const auto& text : texts) {
        INFO(text.substr(0, 40));
        auto full = encode_ok(*tok, text);
        const auto n = std::int64_t(full.size());
        auto exact = tok->encode(text, n);
        REQUIRE(exact.ok());
        CHECK(exact.value() == full);
        auto over = tok->encode(text, n - 1);
        REQUIRE_FALSE(over.ok());
        CHECK(over.code() == status::context_overflow);
        CHECK(tok->encode(text, 0).code() == status::context_overflow);
    }
    CHECK(tok->encode("bad \xFF", 100).code() == status::invalid_argument);  // validation first
}

TEST_CASE("tokenizer max_text_bytes is a sound bound: a longer text needs more ids") {
    auto tok = qwen3_tokenizer();
    REQUIRE(tok->max_token_bytes() >= 16);
    const std::string longest = longest_token_text(*tok);
    REQUIRE(longest.size() == tok->max_token_bytes());
    // Texts with the fewest ids per byte we know of: the longest token repeated,
    // NFC's largest shrinks (U+212A KELVIN SIGN, 3 bytes -> "K"; Hangul L+V+T jamo,
    // 9 bytes -> one 3-byte syllable), a run of spaces, and one long word.
    const std::vector<std::string> dense{repeat(longest, 8), repeat("\xE2\x84\xAA", 300),
                                         repeat("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", 200), std::string(5000, ' '),
                                         repeat("a", 5000)};
    for (const auto& text : dense) {
        auto n = std::int64_t(encode_ok(*tok, text).size());
        INFO(text.substr(0, 24) << " (" << text.size() << " bytes, " << n << " ids)");
        auto bound = tok->max_text_bytes(n);
        REQUIRE(bound);
        CHECK(text.size() <= *bound);  // otherwise the bound would refuse a text that fits
    }
    auto b = tok->max_text_bytes(100);
    REQUIRE(b);
    CHECK(*b == 100 * tok->max_token_bytes() * model::tokenizer::k_nfc_max_shrink);
}

TEST_CASE("tokenizer encode with a limit stops early on a long text") {
    auto tok = qwen3_tokenizer();
    std::mt19937 rng(5);
    std::string text;
    const char* words[] = {"alpha ", "beta ", "gamma ", "delta ", "epsilon "};
    while (text.size() < 400000) text += words[rng() % 5];
    auto limited = tok->encode(text, 1000);
    REQUIRE_FALSE(limited.ok());
    CHECK(limited.code() == status::context_overflow);
    CHECK(limited.error().message.find("1000") != std::string::npos);
}
