#pragma once
//! The vocabulary-only GGUF file of a package (`__Tokenizer/<model>.vocab.gguf`).
//!
//! Role: write a GGUF v3 file with no tensors and the tokenizer metadata
//! (architecture, name, tokenizer model, token list); read its header back for
//! the validator. Fault model: the reader bounds every length by the bytes left,
//! so a corrupt or hostile file yields `package_invalid`, never a large allocation.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "config/result.hpp"

namespace calserve::model::package {

std::string write_vocab_gguf(std::string_view architecture, std::string_view name,
                             const std::vector<std::string>& tokens);

struct gguf_info {
    std::uint32_t version = 0;
    std::uint64_t tensor_count = 0;
    std::map<std::string, std::string> strings;  // string-valued keys
    std::map<std::string, std::uint64_t> integers;
    std::uint64_t token_count = 0;               // length of tokenizer.ggml.tokens
};
result<gguf_info> parse_gguf(std::string_view bytes);

}  // namespace calserve::model::package
