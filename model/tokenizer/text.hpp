#pragma once
//! Text primitives of the tokenizer: strict UTF-8 validation, lossy UTF-8 decoding
//! (U+FFFD per maximal invalid subpart, as Rust's from_utf8_lossy and WHATWG's
//! TextDecoder do), the NFC normaliser and the GPT-2 byte-level alphabet.
//!
//! Invariants: `append_utf8_lossy` always produces valid UTF-8, and decoding a
//! buffer in two parts split where `incomplete_utf8_tail` says gives the same text
//! as decoding it whole (the stream decoder relies on this). The NFC fast path
//! returns "unchanged" only when every code point is a starter that NFC can neither
//! decompose nor compose with a neighbour, so skipping utf8proc is exact.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/result.hpp"

namespace calserve::model::detail {

inline constexpr std::size_t utf8_valid = static_cast<std::size_t>(-1);

// Offset of the first byte that starts an invalid sequence, or utf8_valid.
std::size_t find_invalid_utf8(std::string_view s);
// Decodes the code point at s[i] (s must be valid UTF-8) and advances i.
char32_t next_code_point(std::string_view s, std::size_t& i);
void append_utf8(std::string& out, char32_t cp);
// Appends `bytes` as UTF-8, each maximal invalid subpart replaced by U+FFFD.
void append_utf8_lossy(std::string& out, std::string_view bytes);
// Number of trailing bytes (0..3) forming a valid but unfinished sequence.
std::size_t incomplete_utf8_tail(std::string_view bytes);
// JavaScript's String.prototype.trim whitespace (used for added-token lstrip/rstrip).
bool is_js_whitespace(char32_t cp);

class nfc_normalizer {
public:
    nfc_normalizer();
    // True (and `out` filled) when NFC changes `in`; false when `in` is already NFC.
    // `in` must be valid UTF-8.
    result<bool> normalize(std::string_view in, std::string& out) const;
    bool is_inert(char32_t cp) const;

private:
    static constexpr char32_t table_limit_ = 0x30000;  // above: always take the exact path
    std::vector<std::uint64_t> inert_bits_;
};

// byte -> the UTF-8 of the printable code point that stands for it in the vocab.
const std::array<std::string, 256>& byte_level_alphabet();
// code point -> byte, or -1 when the code point is not in the alphabet.
int byte_level_byte_of(char32_t cp);

}  // namespace calserve::model::detail
