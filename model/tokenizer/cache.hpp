#pragma once
//! Per-thread cache of BPE results (word bytes -> ids), the tokenizer's hot path:
//! natural text repeats its words, and a hit skips the merge loop and its random
//! accesses into the multi-megabyte merge table.
//!
//! Direct-mapped with a fixed number of slots, so memory is bounded (about 1.7 MB
//! per thread and tokenizer) and a miss simply overwrites its slot. Caches are
//! thread_local and keyed by the tokenizer's load generation, so the shared const
//! tokenizer needs no lock and a cache never serves ids of another tokenizer.
//! Invariant: an entry holds exactly what `bpe_merges::encode_word` returned for
//! its word; words or results too long for a slot are never cached.
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "model/core/causal_lm.hpp"

namespace calserve::model::detail {

class word_cache {
public:
    static constexpr std::size_t slots = 1 << 14;
    static constexpr std::size_t max_word = 46;
    static constexpr std::size_t max_ids = 12;

    word_cache() : entries_(slots) {}

    bool lookup(std::string_view word, std::uint64_t hash, std::vector<token_id>& out) const {
        const entry& e = entries_[hash & (slots - 1)];
        if (e.hash != hash || e.len != word.size() || std::memcmp(e.word, word.data(), word.size()) != 0) return false;
        out.insert(out.end(), e.ids, e.ids + e.n_ids);
        return true;
    }

    void store(std::string_view word, std::uint64_t hash, std::span<const token_id> ids) {
        if (word.size() > max_word || ids.size() > max_ids || ids.empty()) return;
        entry& e = entries_[hash & (slots - 1)];
        e.hash = hash;
        e.len = static_cast<std::uint8_t>(word.size());
        e.n_ids = static_cast<std::uint8_t>(ids.size());
        std::memcpy(e.word, word.data(), word.size());
        std::memcpy(e.ids, ids.data(), ids.size() * sizeof(token_id));
    }

private:
    struct entry {
        std::uint64_t hash = 0;
        std::uint8_t len = 0xFF;  // no word has this length: the slot is empty
        std::uint8_t n_ids = 0;
        char word[max_word];
        token_id ids[max_ids];
    };
    std::vector<entry> entries_;
};

// The calling thread's cache for the tokenizer loaded as `generation`.
inline word_cache& thread_word_cache(std::uint64_t generation) {
    struct keyed {
        std::uint64_t generation = 0;
        std::unique_ptr<word_cache> cache;
    };
    thread_local std::array<keyed, 2> caches;
    thread_local std::size_t next_victim = 0;
    for (keyed& k : caches) {
        if (k.cache && k.generation == generation) return *k.cache;
    }
    keyed& k = caches[next_victim];
    next_victim = (next_victim + 1) % caches.size();
    k.generation = generation;
    k.cache = std::make_unique<word_cache>();
    return *k.cache;
}

}  // namespace calserve::model::detail
