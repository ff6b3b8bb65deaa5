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
#include "model/core/causal_lm.hpp"
#include "model/chat/message.hpp"

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
    // The same ids, or `context_overflow` as soon as the text is known to need more
    // than `max_tokens` ids: a segment whose normalised bytes cannot fit in what is
    // left (each token covers at most max_token_bytes() of them) is refused before
    // its pre-tokenizer and BPE run, and BPE stops after the first piece past the
    // limit. The work for a text that overflows is thereby bounded by the limit.
    result<std::vector<token_id>> encode(std::string_view text, std::int64_t max_tokens) const;

    // Bytes of the longest token (vocabulary and added tokens).
    std::size_t max_token_bytes() const;
    // An upper bound on the UTF-8 bytes of a text that can encode to at most
    // `tokens` ids, or nullopt when there is none (an added token with lstrip/rstrip
    // swallows any amount of whitespace). Every encoded byte belongs to one token of
    // at most max_token_bytes() bytes; the text is that after NFC, which shrinks
    // UTF-8 by at most k_nfc_max_shrink (docs/tokenizer.md). A longer text is sure
    // to need more than `tokens` ids: callers refuse it without tokenizing.
    std::optional<std::size_t> max_text_bytes(std::int64_t tokens) const;
    static constexpr std::size_t k_nfc_max_shrink = 3;
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
    /// Ids of the added tokens (tokenizer.json `added_tokens`, special or not).
    std::vector<token_id> added_token_ids() const;

    // Qwen3 ChatML, as the chat_template of tokenizer_config.json renders it
    // (tools, tool calls, tool responses, reasoning). enable_thinking=false appends
    // the empty think block after the generation prompt. Empty message list or
    // unknown role -> invalid_argument.
    result<std::string> apply_chat_template(std::span<const chat_message> messages, bool add_generation_prompt,
                                            bool enable_thinking = false) const;
    result<std::string> apply_chat_template(std::span<const chat_message> messages,
                                            const chat_options& options) const;

    ~tokenizer();
    tokenizer(const tokenizer&) = delete;
    tokenizer& operator=(const tokenizer&) = delete;

private:
    explicit tokenizer(std::unique_ptr<detail::tokenizer_data> data);
    std::unique_ptr<detail::tokenizer_data> data_;
};

}  // namespace calserve::model
