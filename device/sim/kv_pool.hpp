#pragma once
//! KV capacity accounting of the simulated device, in blocks of `block_tokens`
//! tokens, mirroring CalRT's KV allocate / apply / free / clear / canAllocate.
//! `allocate` registers a sequence (optionally reserving tokens); `apply` grows a
//! sequence's blocks to cover a total token count; neither ever waits: no room is
//! an immediate `kv_full` (the caller queues or pushes back).
//!
//! Invariants: blocks_used == sum of the sequences' blocks <= blocks_total; a
//! sequence never holds more than ceil(context / block_tokens) blocks. Not
//! thread-safe: the device holds its lock around every call.
#include <cstdint>
#include <unordered_map>

#include "config/result.hpp"
#include "device/types.hpp"

namespace calserve::device::sim {

class kv_pool {
public:
    explicit kv_pool(const kv_layout& layout);

    bool can_allocate(std::int64_t tokens) const;
    void_result allocate(seq_id seq, std::int64_t reserve_tokens);
    void_result apply(seq_id seq, std::int64_t total_tokens);
    // Shrinks a sequence to the blocks holding `tokens` (never grows it).
    void_result keep(seq_id seq, std::int64_t tokens);
    void_result free(seq_id seq);
    void clear();

    bool contains(seq_id seq) const { return seqs_.contains(seq); }
    // Tokens the sequence's blocks can hold (0 if unknown).
    std::int64_t capacity_of(seq_id seq) const;
    kv_usage usage() const;
    std::int64_t context() const { return context_; }

private:
    std::int64_t blocks_for(std::int64_t tokens) const { return (tokens + block_tokens_ - 1) / block_tokens_; }

    std::int64_t block_tokens_;
    std::int64_t context_;
    std::int64_t blocks_total_;
    std::int64_t blocks_used_ = 0;
    std::unordered_map<seq_id, std::int64_t> seqs_;  // seq -> blocks held
};

}  // namespace calserve::device::sim
