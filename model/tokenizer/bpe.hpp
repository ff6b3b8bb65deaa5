#pragma once
//! Byte-level BPE merging: the merge table (pair of ids -> rank, rank -> merged id)
//! and the merge loop that turns one pre-tokenized word (raw bytes) into vocab ids.
//!
//! Semantics (as Hugging Face tokenizers and transformers.js): start from one
//! symbol per byte; repeatedly merge the adjacent pair with the lowest rank, the
//! leftmost one on ties; stop when no adjacent pair has a merge. Two loops give the
//! same result: a quadratic scan for short words (no allocation) and a heap-based
//! one for long words (n log n), so a megabyte-long word stays fast.
//!
//! The pair table is the hot data: one 8-byte slot per entry (40-bit pair key,
//! 24-bit rank) in open addressing, about 2 MB for Qwen's 151k merges, plus a dense
//! 256x256 table for the byte pairs every word starts with. Limits (checked at
//! load): ids below 2^20 - 1, fewer than 2^24 - 1 merges. Invariants: immutable
//! after load; ids it returns are valid vocab ids.
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "model/core/causal_lm.hpp"

namespace calserve::model::detail {

class bpe_merges {
public:
    static constexpr std::int32_t no_rank = 0x00FFFFFF;
    static constexpr token_id max_id = (1 << 20) - 2;
    static constexpr std::size_t scan_limit = 48;  // words longer than this use the heap

    explicit bpe_merges(std::size_t expected_merges = 0);
    // Ranks must be added in increasing order from 0; a repeated pair keeps its
    // first (lowest) rank. Returns false when an id or the rank is out of range.
    bool add(token_id left, token_id right, token_id merged);
    std::int32_t rank_of(token_id left, token_id right) const;
    token_id merged_of(std::int32_t rank) const { return merged_[static_cast<std::size_t>(rank)]; }
    std::int32_t byte_pair_rank(std::uint8_t left, std::uint8_t right) const {
        return byte_pairs_[(static_cast<std::size_t>(left) << 8) | right];
    }
    std::size_t size() const { return size_; }

    std::array<token_id, 256> byte_ids{};  // id of the one-byte token for each byte
    // Fills the byte-pair table; call once byte_ids and all merges are known.
    void index_byte_pairs();

    // Appends the ids of `word` (raw bytes, non-empty) to `out`.
    void encode_word(std::string_view word, std::vector<token_id>& out) const;
    // Both loops, exposed so tests can check they agree.
    void encode_word_scan(std::string_view word, std::vector<token_id>& out) const;
    void encode_word_heap(std::string_view word, std::vector<token_id>& out) const;

private:
    static constexpr std::uint64_t empty_slot = ~std::uint64_t{0};
    static std::uint64_t key_of(token_id l, token_id r) {
        return (static_cast<std::uint64_t>(l) << 20) | static_cast<std::uint64_t>(r);
    }
    std::size_t index_of(std::uint64_t key) const {
        return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
    }
    void grow();
    void insert(std::uint64_t slot);

    std::vector<std::uint64_t> slots_;  // (key << 24) | rank, or empty_slot
    std::vector<token_id> merged_;      // rank -> merged id
    std::vector<std::int32_t> byte_pairs_ = std::vector<std::int32_t>(65536, no_rank);
    unsigned shift_ = 64;
    std::size_t size_ = 0;
};

}  // namespace calserve::model::detail
