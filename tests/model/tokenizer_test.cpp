// Unit tests of the tokenizer: metadata read from the files, known encodings,
// inline special tokens, NFC, invalid UTF-8, unknown ids, the two BPE loops and
// the NFC fast-path table.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <utf8proc.h>

#include "model/tokenizer/data.hpp"
#include "tests/model/tokenizer_corpus.hpp"
#include "tests/model/tokenizer_fixture.hpp"

using calserve::status;
using calserve::model::token_id;
using calserve::test::encode_ok;
using calserve::test::qwen3_tokenizer;
using ids = std::vector<token_id>;

TEST_CASE("tokenizer metadata comes from tokenizer.json and tokenizer_config.json") {
    auto tok = qwen3_tokenizer();
    CHECK(tok->vocab_size() == 151669);
    CHECK(tok->model_max_length() == 131072);
    CHECK(tok->token_to_id("<|im_end|>") == 151645);
    CHECK(tok->token_to_id("<|endoftext|>") == 151643);
    CHECK(tok->token_to_id("<think>") == 151667);
    CHECK(tok->token_to_id("Hello") == 9707);
    CHECK_FALSE(tok->token_to_id("no such token").has_value());
    CHECK(tok->id_to_token(9707) == "Hello");
    CHECK(tok->id_to_token(220) == "\xC4\xA0");  // "Ġ", the byte-level space
    CHECK(tok->id_to_token(151669).empty());
    CHECK(tok->id_to_token(-1).empty());
    auto eos = tok->eos_token_ids();
    REQUIRE(eos.size() == 2);
    CHECK(eos[0] == 151645);  // eos_token of tokenizer_config.json first
    CHECK(eos[1] == 151643);
    CHECK(tok->token_bytes(220) == std::vector<std::uint8_t>{' '});
    CHECK(tok->token_bytes(151644) == std::vector<std::uint8_t>{'<', '|', 'i', 'm', '_', 's', 't', 'a', 'r', 't', '|', '>'});
    CHECK(tok->token_bytes(999999).empty());
    CHECK(tok->is_special(151645));
    CHECK_FALSE(tok->is_special(151667));
}

TEST_CASE("tokenizer encodes known strings and matches special tokens inline") {
    auto tok = qwen3_tokenizer();
    CHECK(encode_ok(*tok, "Hello, world! <|im_start|>user\nhi<|im_end|>") ==
          ids{9707, 11, 1879, 0, 220, 151644, 872, 198, 6023, 151645});
    CHECK(encode_ok(*tok, "a<|endoftext|>b") == ids{64, 151643, 65});
    CHECK(encode_ok(*tok, "<|im_start|> <think>") == ids{151644, 220, 151667});
    CHECK(encode_ok(*tok, "12345678 3.14") == ids{16, 17, 18, 19, 20, 21, 22, 23, 220, 18, 13, 16, 19});
    CHECK(encode_ok(*tok, "  \r\n\r\n  x   ") == ids{72745, 220, 856, 262});
    CHECK(encode_ok(*tok, "").empty());
    // An unterminated special token is ordinary text.
    auto partial = encode_ok(*tok, "<|im_end|");
    CHECK(std::find(partial.begin(), partial.end(), 151645) == partial.end());
}

TEST_CASE("tokenizer applies NFC before BPE") {
    auto tok = qwen3_tokenizer();
    CHECK(encode_ok(*tok, "e\xCC\x81 caf\xC3\xA9") == ids{963, 51950});
    CHECK(encode_ok(*tok, "caf" "e\xCC\x81") == encode_ok(*tok, "caf\xC3\xA9"));
    // Hangul jamo compose into the syllable.
    CHECK(encode_ok(*tok, "\xE1\x84\x80\xE1\x85\xA1") == encode_ok(*tok, "\xEA\xB0\x80"));
    // Special tokens are cut out before normalisation and survive it.
    CHECK(encode_ok(*tok, "<|im_end|>e\xCC\x81") == ids{151645, encode_ok(*tok, "\xC3\xA9")[0]});
}

TEST_CASE("tokenizer rejects invalid UTF-8 with a clear message") {
    auto tok = qwen3_tokenizer();
    const std::vector<std::pair<std::string, std::size_t>> bad = {
        {"ab\xFF", 2},               {"\xC0\xAF", 0},              // invalid byte, overlong
        {"x\xED\xA0\x80y", 1},       {"\xE4\xB8", 0},              // surrogate, truncated
        {"ok \xF4\x90\x80\x80", 3},  {"\x80", 0},                  // above U+10FFFF, stray continuation
        {"\xE0\x80\x80", 0},         {"caf\xC3", 3}};
    for (const auto& [text, offset] : bad) {
        auto r = tok->encode(text);
        REQUIRE_FALSE(r.ok());
        CHECK(r.code() == status::invalid_argument);
        CHECK_THAT(r.error().message, Catch::Contains("UTF-8") && Catch::Contains("offset " + std::to_string(offset)));
    }
}

TEST_CASE("tokenizer decode rejects unknown ids and replaces broken UTF-8") {
    auto tok = qwen3_tokenizer();
    for (token_id bad : {-1, 151669, 151935, 1 << 30}) {
        auto r = tok->decode(std::vector<token_id>{9707, bad});
        REQUIRE_FALSE(r.ok());
        CHECK(r.code() == status::invalid_argument);
        CHECK_THAT(r.error().message, Catch::Contains(std::to_string(bad)));
    }
    auto hello = tok->decode(ids{9707, 11, 1879, 0, 220, 151644});
    REQUIRE(hello.ok());
    CHECK(*hello == "Hello, world! <|im_start|>");
    // A lone lead byte (its byte-level token) decodes to U+FFFD.
    auto lead = tok->token_to_id("\xC3\xA3");  // "ã" stands for byte 0xE3
    REQUIRE(lead.has_value());
    CHECK(*tok->decode(ids{*lead, 64}) == "\xEF\xBF\xBD" "a");
}

TEST_CASE("tokenizer BPE: the short-word and long-word merge loops agree") {
    auto data = calserve::model::detail::load_tokenizer_data(calserve::test::tokenizer_dir());
    REQUIRE(data.ok());
    const auto& merges = (*data)->merges;
    calserve::test::corpus::rng r(7);
    for (int i = 0; i < 3000; ++i) {
        std::string word = calserve::test::corpus::any_sample(r).substr(0, 1 + r.below(160));
        ids scan, heap;
        if (word.size() <= calserve::model::detail::bpe_merges::scan_limit) merges.encode_word_scan(word, scan);
        else scan = {};
        merges.encode_word_heap(word, heap);
        if (!scan.empty()) REQUIRE(scan == heap);
        // Concatenated token bytes give the word back.
        std::string back;
        for (token_id id : heap) back += (*data)->bytes_of(id);
        REQUIRE(back == word);
    }
    ids run;
    merges.encode_word_heap(std::string(5000, 'a'), run);
    CHECK(run.size() < 5000 / 4);
}

TEST_CASE("tokenizer NFC fast path only skips code points NFC leaves alone") {
    calserve::model::detail::nfc_normalizer nfc;
    for (char32_t cp : {U'a', U'\u00E9', U'\u4E00', U'\uAC00', U'\u0627', U'\U0001F600'}) CHECK(nfc.is_inert(cp));
    // Combining marks, second-of-pair starters, Hangul V/T jamo, singletons and exclusions.
    for (char32_t cp : {U'\u0301', U'\u0B3E', U'\u1161', U'\u11A8', U'\u2126', U'\u0958', U'\u0344', U'\U0001D15E'}) {
        CHECK_FALSE(nfc.is_inert(cp));
    }
    // Exhaustive over the table: an inert code point after any inert starter stays as is.
    const std::string probe_starters[] = {"a", "A", "\xE1\x84\x80", "\xEA\xB0\x80", "\xE0\xAD\x87", "\xE0\xA7\x87"};
    std::size_t checked = 0;
    for (char32_t cp = 0x80; cp < 0x30000; cp += 1) {
        // U+11A7: utf8proc wrongly composes it (see tokenizer_text.cpp); covered below.
        if (!nfc.is_inert(cp) || cp == 0x11A7) continue;
        for (const auto& s : probe_starters) {
            std::string text = s;
            calserve::model::detail::append_utf8(text, cp);
            // Independent of the fast path: utf8proc's NFC of the pair.
            utf8proc_uint8_t* mapped = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(text.c_str()));
            REQUIRE(mapped != nullptr);
            bool same = text == reinterpret_cast<const char*>(mapped);
            std::free(mapped);
            if (!same) FAIL("NFC changes U+" << std::hex << static_cast<std::uint32_t>(cp) << " after " << s);
            ++checked;
        }
        cp += static_cast<char32_t>(std::getenv("CALSERVE_SANITIZED") ? 97 : 0);
    }
    CHECK(checked > 1000);
}

TEST_CASE("tokenizer NFC keeps U+11A7 after a Hangul syllable (utf8proc would drop it)") {
    auto tok = qwen3_tokenizer();
    for (std::string text : {"\xEA\xB0\x80\xE1\x86\xA7", "e\xCC\x81\xEA\xB0\x80\xE1\x86\xA7x\xE1\x86\xA7"}) {
        auto back = tok->decode(encode_ok(*tok, text));
        REQUIRE(back.ok());
        std::string expected = text[0] == 'e' ? "\xC3\xA9" + text.substr(3) : text;
        CHECK(*back == expected);
    }
}

TEST_CASE("tokenizer is shared by threads: concurrent encodes give the single-thread ids") {
    auto tok = qwen3_tokenizer();
    calserve::test::corpus::rng r(3);
    std::vector<std::string> texts;
    for (int i = 0; i < 300; ++i) texts.push_back(calserve::test::corpus::any_sample(r));
    std::vector<ids> expected;
    for (const auto& t : texts) expected.push_back(encode_ok(*tok, t));
    std::atomic<int> mismatches{0};
    auto worker = [&](std::size_t offset) {
        for (std::size_t k = 0; k < texts.size(); ++k) {
            std::size_t i = (k + offset) % texts.size();
            auto got = tok->encode(texts[i]);
            if (!got || *got != expected[i]) ++mismatches;
        }
    };
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < 4; ++t) threads.emplace_back(worker, t * 71);
    for (auto& th : threads) th.join();
    CHECK(mismatches.load() == 0);
}
