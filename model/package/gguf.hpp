#pragma once
//! The vocabulary-only GGUF file of a package (`__Tokenizer/<model>.vocab.gguf`).
//!
//! Role: the package's use of the one GGUF implementation (model/weights/gguf.hpp):
//! which keys a vocabulary file carries (architecture, name, tokenizer model,
//! alignment, token list; no tensors) and what the validator reads back (the
//! token count). Fault model: the weights reader bounds every length by the bytes
//! left, so a corrupt or hostile file yields `package_invalid`, never a large
//! allocation or a crash.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/result.hpp"

namespace calserve::model::package {

std::string write_vocab_gguf(std::string_view architecture, std::string_view name,
                             const std::vector<std::string>& tokens);

// Reads a vocabulary file: the length of its tokenizer.ggml.tokens (0 when absent).
// `label` names the file in errors.
result<std::uint64_t> vocab_gguf_token_count(std::string_view bytes, std::string_view label = "vocabulary");

}  // namespace calserve::model::package
