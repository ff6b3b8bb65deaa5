#pragma once
//! The immutable state behind `tokenizer` (internal to model/): vocab strings and
//! bytes per id, the added-token matcher, the NFC normaliser, the pre-tokenizer
//! regexes and the BPE merge table. Built once by `load_tokenizer_data`.
//!
//! Invariants: `tokens[i]`/`bytes_of(i)` are defined for every id < tokens.size()
//! that `known[i]` marks; added tokens are listed longest first within each
//! first-byte bucket so the first hit is the longest match.
#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/result.hpp"
#include "model/core/causal_lm.hpp"
#include "model/tokenizer/bpe.hpp"
#include "model/tokenizer/regex.hpp"
#include "model/tokenizer/text.hpp"

namespace calserve::model::detail {

struct added_token {
    std::string content;
    token_id id = 0;
    bool special = false;
    bool lstrip = false;
    bool rstrip = false;
};

struct string_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct tokenizer_data {
    std::vector<std::string> tokens;  // id -> raw vocab string
    std::vector<std::uint8_t> known;  // id -> 1 when the id exists
    std::vector<std::uint8_t> special;
    std::vector<std::uint32_t> byte_offsets;  // id -> [offsets[id], offsets[id+1]) in bytes
    std::string bytes;
    std::unordered_map<std::string, token_id, string_hash, std::equal_to<>> token_ids;

    std::vector<added_token> added;
    std::array<std::vector<std::uint16_t>, 256> added_by_first_byte;  // indices into `added`

    bool nfc = false;
    nfc_normalizer normalizer;
    std::vector<std::unique_ptr<split_regex>> splits;  // applied in order, Isolated
    bpe_merges merges;

    std::uint64_t generation = 0;  // unique per load; keys the per-thread word caches
    std::vector<token_id> eos_ids;
    std::int64_t model_max_length = 0;
    bool chatml_template = false;  // tokenizer_config's chat_template is ChatML
    std::size_t max_token_bytes = 0;  // longest token (vocabulary or added), bytes

    std::string_view bytes_of(token_id id) const {
        auto i = static_cast<std::size_t>(id);
        return std::string_view(bytes).substr(byte_offsets[i], byte_offsets[i + 1] - byte_offsets[i]);
    }
    bool has_id(token_id id) const { return id >= 0 && static_cast<std::size_t>(id) < known.size() && known[static_cast<std::size_t>(id)]; }
};

// `dir`: a directory with tokenizer.json + tokenizer_config.json, or a GGUF file.
result<std::unique_ptr<tokenizer_data>> load_tokenizer_data(const std::filesystem::path& dir);
// The tokenizer embedded in a GGUF file (tokenizer.ggml.*, pre-tokenizer qwen2).
result<std::unique_ptr<tokenizer_data>> load_tokenizer_data_gguf(const std::filesystem::path& file);
// Sets merges.byte_ids from the byte-level tokens of token_ids; the first byte
// without a token, if any (the loaders word the error).
std::optional<int> fill_byte_ids(tokenizer_data& d);

// Building blocks shared by both loaders.
void set_vocab_token(tokenizer_data& d, token_id id, std::string token);
void_result add_split_regex(tokenizer_data& d, const std::string& pattern);
void_result index_added_tokens(tokenizer_data& d);  // after every added token is in d.added
void finish_token_bytes(tokenizer_data& d);         // after vocab and added tokens

}  // namespace calserve::model::detail
