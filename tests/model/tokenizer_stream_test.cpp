// Streaming detokenizer: never emits a partial UTF-8 sequence, and the pushes plus
// the final flush concatenate to exactly what decode() returns for the same ids.
#include <catch2/catch.hpp>

#include "model/tokenizer/stream_decoder.hpp"
#include "model/tokenizer/text.hpp"
#include "tests/model/tokenizer_corpus.hpp"
#include "tests/model/tokenizer_fixture.hpp"

using calserve::model::stream_decoder;
using calserve::model::token_id;
using calserve::model::detail::find_invalid_utf8;
using calserve::model::detail::utf8_valid;
using calserve::test::qwen3_tokenizer;

namespace {
// Streams `ids` and checks every piece is whole UTF-8; returns the concatenation.
std::string stream_all(const std::vector<token_id>& ids, std::size_t* held_back = nullptr) {
    stream_decoder dec(qwen3_tokenizer());
    std::string all;
    for (token_id id : ids) {
        std::string piece = dec.push(id);
        if (find_invalid_utf8(piece) != utf8_valid) FAIL("push emitted broken UTF-8 for id " << id);
        if (held_back && dec.pending_bytes() > 0) ++*held_back;
        all += piece;
    }
    std::string tail = dec.flush();
    CHECK(find_invalid_utf8(tail) == utf8_valid);
    CHECK(dec.pending_bytes() == 0);
    return all + tail;
}
}  // namespace

TEST_CASE("stream decoder holds back an emoji split over several tokens") {
    auto tok = qwen3_tokenizer();
    // U+1F9CC (troll) is two tokens: three bytes, then one; U+1F977 U+1F3FF
    // (ninja, dark skin tone) splits too.
    const std::string text = "ok \xF0\x9F\xA7\x8C\xF0\x9F\xA5\xB7\xF0\x9F\x8F\xBF!";
    auto ids = calserve::test::encode_ok(*tok, text);
    stream_decoder dec(tok);
    std::vector<std::string> pieces;
    for (token_id id : ids) pieces.push_back(dec.push(id));
    pieces.push_back(dec.flush());
    std::string joined;
    bool held = false;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
        CHECK(find_invalid_utf8(pieces[i]) == utf8_valid);
        if (pieces[i].empty() && i + 1 < pieces.size()) held = true;
        joined += pieces[i];
    }
    CHECK(held);  // the emoji's bytes did not all arrive with one token
    CHECK(joined == text);
}

TEST_CASE("stream decoder equals decode() over the corpus and over random ids") {
    auto tok = qwen3_tokenizer();
    calserve::test::corpus::rng r(11);
    std::size_t held_back = 0;
    for (int i = 0; i < 400; ++i) {
        auto ids = calserve::test::encode_ok(*tok, calserve::test::corpus::any_sample(r));
        REQUIRE(stream_all(ids, &held_back) == *tok->decode(ids));
    }
    CHECK(held_back > 0);
    // Arbitrary id sequences, rich in lone byte tokens, exercise the U+FFFD path.
    auto byte_token = [&](unsigned b) { return *tok->token_to_id(calserve::model::detail::byte_level_alphabet()[b]); };
    for (int i = 0; i < 400; ++i) {
        std::vector<token_id> ids;
        std::size_t n = r.between(1, 12);
        for (std::size_t k = 0; k < n; ++k) {
            ids.push_back(r.chance(70) ? byte_token(static_cast<unsigned>(0x80 + r.below(0x80)))
                                       : static_cast<token_id>(r.below(151669)));
        }
        REQUIRE(stream_all(ids) == *tok->decode(ids));
    }
}

TEST_CASE("stream decoder flush turns an unfinished sequence into U+FFFD") {
    auto tok = qwen3_tokenizer();
    stream_decoder dec(tok);
    auto lead = tok->token_to_id(calserve::model::detail::byte_level_alphabet()[0xF0]);
    REQUIRE(lead.has_value());
    CHECK(dec.push(*lead).empty());
    CHECK(dec.pending_bytes() == 1);
    CHECK(dec.flush() == "\xEF\xBF\xBD");
    CHECK(dec.push(tok->encode("a").value()[0]) == "a");
}
