#pragma once
// The Qwen3 tokenizer shared by the tokenizer tests (loaded once per process from
// test::tokenizer_dir(); a missing or broken file fails the test that asks).
#include <catch2/catch.hpp>
#include <memory>

#include "model/tokenizer/tokenizer.hpp"
#include "tests/support/test_paths.hpp"

namespace calserve::test {

inline std::shared_ptr<const model::tokenizer> qwen3_tokenizer() {
    static auto loaded = model::tokenizer::load(tokenizer_dir());
    if (!loaded) FAIL("cannot load the Qwen3 tokenizer from " << tokenizer_dir() << ": " << loaded.error().what()
                                                              << " (run tools/bootstrap)");
    return loaded.value();
}

inline std::vector<model::token_id> encode_ok(const model::tokenizer& tok, std::string_view text) {
    auto ids = tok.encode(text);
    if (!ids) FAIL("encode failed: " << ids.error().what());
    return ids.value();
}

}  // namespace calserve::test
