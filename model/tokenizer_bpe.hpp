#pragma once
//! Byte-level BPE merging: the merge table (pair of ids -> rank and merged id) and
//! the merge loop that turns one pre-tokenized word (raw bytes) into vocab ids.
//!
//! Semantics (as Hugging Face tokenizers and transformers.js): start from one
//! symbol per byte; repeatedly merge the adjacent pair with the lowest rank, the
//! leftmost one on ties; stop when no adjacent pair has a merge. Two loops give the
//! same result: a quadratic scan for short words (cache friendly, no allocation
//! beyond the symbol list) and a heap-based one for long words (n log n), so a
//! megabyte-long word stays linear-ish. Invariants: the table is immutable after
//! load; ids it returns are valid vocab ids.
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "model/causal_lm.hpp"

namespace calserve::model::detail {

class bpe_merges {
public:
    struct merge {
        std::int32_t rank;
        token_id merged;
    };

    explicit bpe_merges(std::size_t expected_merges = 0);
    // Later duplicates of a pair are ignored (the first, lowest rank wins).
    void add(token_id left, token_id right, token_id merged, std::int32_t rank);
    const merge* find(token_id left, token_id right) const;
    std::size_t size() const { return size_; }

    std::array<token_id, 256> byte_ids{};  // id of the one-byte token for each byte

    // Appends the ids of `word` (raw bytes, non-empty) to `out`.
    void encode_word(std::string_view word, std::vector<token_id>& out) const;
    // Both loops, exposed so tests can check they agree.
    void encode_word_scan(std::string_view word, std::vector<token_id>& out) const;
    void encode_word_heap(std::string_view word, std::vector<token_id>& out) const;

    static constexpr std::size_t scan_limit = 48;  // words longer than this use the heap

private:
    struct slot {
        std::uint64_t key;  // (left << 32) | right; empty_key when unused
        merge value;
    };
    static constexpr std::uint64_t empty_key = ~std::uint64_t{0};
    static std::uint64_t key_of(token_id l, token_id r) {
        return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(l)) << 32) | static_cast<std::uint32_t>(r);
    }
    std::size_t index_of(std::uint64_t key) const {
        return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
    }
    void grow();

    std::vector<slot> slots_;
    unsigned shift_ = 64;
    std::size_t size_ = 0;
};

}  // namespace calserve::model::detail
