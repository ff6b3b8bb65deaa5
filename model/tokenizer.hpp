#pragma once
//! The Hugging Face byte-level BPE tokenizer (Qwen2/Qwen3 family), loaded from a
//! model directory's `tokenizer.json` + `tokenizer_config.json`.
//!
//! Pipeline of `encode`: UTF-8 validation -> added/special tokens matched inline
//! (longest match, left to right, before anything else) -> per remaining segment:
//! NFC (utf8proc) -> the Split pre-tokenizer regex read from tokenizer.json, run by
//! PCRE2 with JIT in UTF+UCP mode -> byte-level alphabet -> BPE merges by rank.
//! No BOS/EOS is ever added: callers (chat template, server) place special tokens
//! explicitly. `decode` concatenates the bytes of each token and replaces invalid
//! UTF-8 with U+FFFD (tokenizer_config `errors: replace`), so it always returns
//! valid UTF-8; `stream_decoder` gives the same text incrementally.
//!
//! Fault model: a malformed or unsupported tokenizer file fails `load` with
//! parse_error/unsupported and a message naming the field; invalid UTF-8 input and
//! unknown ids are `invalid_argument` results, never a crash or silent corruption.
//! Invariants: a loaded tokenizer is immutable, so one instance is shared by every
//! thread (`encode`/`decode` are const and thread-safe); every id in
//! [0, vocab_size()) has a token string and its bytes.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/result.hpp"
#include "model/causal_lm.hpp"
#include "model/chat_message.hpp"

namespace calserve::model {

namespace detail {
struct tokenizer_data;
}

class tokenizer {
public:
    // Reads `dir/tokenizer.json` and `dir/tokenizer_config.json`.
    static result<std::shared_ptr<const tokenizer>> load(const std::filesystem::path& dir);

    // Text -> ids; special/added tokens in the text are matched inline, none added.
    // Invalid UTF-8 or more than 1 GiB of input -> invalid_argument.
    result<std::vector<token_id>> encode(std::string_view text) const;
    // Ids -> text (special tokens included verbatim); unknown id -> invalid_argument.
    result<std::string> decode(std::span<const token_id> ids) const;

    std::int64_t vocab_size() const;  // model vocab + added tokens
    std::optional<token_id> token_to_id(std::string_view token) const;
    std::string_view id_to_token(token_id id) const;  // raw vocab string; empty if unknown
    std::vector<token_id> eos_token_ids() const;
    std::int64_t model_max_length() const;
    // Bytes the token decodes to (possibly a partial UTF-8 sequence); empty if unknown.
    std::vector<std::uint8_t> token_bytes(token_id id) const;
    std::string_view token_bytes_view(token_id id) const;
    bool is_special(token_id id) const;

    // Qwen3 ChatML, as the chat_template of tokenizer_config.json renders it
    // (no tools). enable_thinking=false appends the empty think block after the
    // generation prompt. Empty message list or unknown role -> invalid_argument.
    result<std::string> apply_chat_template(std::span<const chat_message> messages, bool add_generation_prompt,
                                            bool enable_thinking = false) const;

    ~tokenizer();
    tokenizer(const tokenizer&) = delete;
    tokenizer& operator=(const tokenizer&) = delete;

private:
    explicit tokenizer(std::unique_ptr<detail::tokenizer_data> data);
    std::unique_ptr<detail::tokenizer_data> data_;
};

}  // namespace calserve::model
