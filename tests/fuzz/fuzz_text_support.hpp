#pragma once
// What the text fuzz targets share (and the network ones through fuzz_support.hpp):
// the Qwen3 tokenizer, loaded once per process, and small input helpers.
#include <memory>
#include <string_view>
#include <vector>

#include "model/tokenizer/tokenizer.hpp"

namespace calserve::fuzz {

// The tokenizer of $CALSERVE_TOKENIZER_DIR, else <source>/.cache/tokenizer-qwen3
// (tools/bootstrap fetches it). Exits the process when it cannot be loaded.
std::shared_ptr<const model::tokenizer> qwen3_tokenizer();

// Splits on `sep`, at most `max_parts` parts (the rest stays in the last one).
std::vector<std::string_view> split(std::string_view in, char sep, std::size_t max_parts);

// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool valid_utf8(std::string_view s);

}  // namespace calserve::fuzz
