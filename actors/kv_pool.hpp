#pragma once
//! KV budget accounting in blocks (pure, no actor): the KvManager actor applies it.
//!
//! Plan/commit: `try_reserve(seq, tokens)` plans enough blocks for `tokens`
//! and returns nothing when they are not free ("wait or push back"); `commit`
//! makes the plan the sequence's reservation. `try_grow(seq, tokens)` plans the
//! extra blocks that take an existing reservation to `tokens` (nothing when they
//! are not free: preempt), `commit_grow` applies it. `extend(seq, length)` moves
//! the used-token mark inside the reservation, per token; `release(seq)` returns
//! every block. Under runtime.kv_policy=reserve a sequence reserves prompt +
//! max_tokens up front and never grows; under on_demand it reserves the prompt
//! plus a step and grows (docs/decisions.md).
//!
//! A released sequence may instead stay as a prefix cache entry (`cache`): its
//! blocks are then *cached*, evictable by the KvManager when KV is needed.
//!
//! Invariants: free + sum(reserved) + sum(cached) == total, every block in exactly
//! one of the three; used_tokens(seq) <= reserved
//! blocks x block_tokens; a sequence holds at most one reservation.
#include <cstdint>
#include <map>
#include <optional>

#include "config/result.hpp"

namespace calserve::actors {

using sequence_id = std::uint64_t;

struct kv_plan {
    sequence_id seq = 0;
    std::int64_t blocks = 0;
    std::int64_t tokens = 0;
};

class kv_pool {
public:
    kv_pool(std::int64_t total_blocks, std::int64_t block_tokens);

    std::int64_t blocks_for(std::int64_t tokens) const { return (tokens + block_tokens_ - 1) / block_tokens_; }
    // Tokens the whole pool holds (capacity, not current load): the context an empty pool
    // offers a sequence (fits_context, actors/schedule_policy.hpp).
    std::int64_t capacity_tokens() const { return total_blocks_ * block_tokens_; }

    [[nodiscard]] std::optional<kv_plan> try_reserve(sequence_id seq, std::int64_t tokens) const;
    void_result commit(const kv_plan& plan);
    // Extra blocks taking `seq`'s reservation to `tokens` (plan.blocks may be 0).
    [[nodiscard]] std::optional<kv_plan> try_grow(sequence_id seq, std::int64_t tokens) const;
    void_result commit_grow(const kv_plan& plan);
    // Tokens the sequence's blocks hold (0 if unknown).
    std::int64_t reserved_tokens(sequence_id seq) const;
    // Marks `length` tokens of `seq` as written. Fails past the reservation.
    void_result extend(sequence_id seq, std::int64_t length);
    // Returns the blocks of `seq`; unknown sequences are ignored. Returns blocks freed.
    std::int64_t release(sequence_id seq);
    // The sequence's KV becomes a prefix cache entry of `tokens`: it keeps the blocks
    // holding them, frees the rest, and counts as cached (not reserved by a request).
    void_result cache(sequence_id seq, std::int64_t tokens);
    bool is_cached(sequence_id seq) const;
    std::int64_t cached_blocks() const;
    std::size_t cached_sequences() const;

    std::int64_t total_blocks() const { return total_blocks_; }
    std::int64_t free_blocks() const { return free_blocks_; }
    // Blocks held by running sequences (cached ones not counted).
    std::int64_t reserved_blocks() const { return total_blocks_ - free_blocks_ - cached_blocks(); }
    // Blocks actually holding tokens (what calserve_kv_blocks_used reports).
    std::int64_t used_blocks() const;
    std::int64_t block_tokens() const { return block_tokens_; }
    std::size_t sequences() const { return held_.size(); }
    bool holds(sequence_id seq) const { return held_.contains(seq); }
    // Checks the conservation invariant (soak and tests).
    bool conserved() const;

private:
    struct holding {
        std::int64_t blocks = 0;
        std::int64_t used_tokens = 0;
        bool cached = false;
    };
    std::int64_t total_blocks_;
    std::int64_t block_tokens_;
    std::int64_t free_blocks_;
    std::map<sequence_id, holding> held_;
};

}  // namespace calserve::actors
