#include "actors/kv_pool.hpp"

#include <algorithm>
#include <string>

namespace calserve::actors {

kv_pool::kv_pool(std::int64_t total_blocks, std::int64_t block_tokens)
    : total_blocks_(total_blocks), block_tokens_(block_tokens > 0 ? block_tokens : 1), free_blocks_(total_blocks) {}

std::optional<kv_plan> kv_pool::try_reserve(sequence_id seq, std::int64_t tokens) const {
    if (tokens <= 0 || held_.contains(seq)) return std::nullopt;
    std::int64_t blocks = blocks_for(tokens);
    if (blocks > free_blocks_) return std::nullopt;
    return kv_plan{seq, blocks, tokens};
}

void_result kv_pool::commit(const kv_plan& plan) {
    if (held_.contains(plan.seq))
        return make_error(status::sequence_exists, "sequence " + std::to_string(plan.seq) + " already holds KV");
    if (plan.blocks > free_blocks_) return make_error(status::kv_full, "plan no longer fits");
    free_blocks_ -= plan.blocks;
    held_[plan.seq] = holding{plan.blocks, 0};
    return {};
}

std::optional<kv_plan> kv_pool::try_grow(sequence_id seq, std::int64_t tokens) const {
    auto it = held_.find(seq);
    if (it == held_.end()) return std::nullopt;
    const std::int64_t extra = std::max<std::int64_t>(0, blocks_for(tokens) - it->second.blocks);
    if (extra > free_blocks_) return std::nullopt;
    return kv_plan{seq, extra, tokens};
}

void_result kv_pool::commit_grow(const kv_plan& plan) {
    auto it = held_.find(plan.seq);
    if (it == held_.end()) return make_error(status::unknown_sequence, "sequence " + std::to_string(plan.seq));
    if (plan.blocks > free_blocks_) return make_error(status::kv_full, "plan no longer fits");
    free_blocks_ -= plan.blocks;
    it->second.blocks += plan.blocks;
    return {};
}

std::int64_t kv_pool::reserved_tokens(sequence_id seq) const {
    auto it = held_.find(seq);
    return it == held_.end() ? 0 : it->second.blocks * block_tokens_;
}

void_result kv_pool::extend(sequence_id seq, std::int64_t length) {
    auto it = held_.find(seq);
    if (it == held_.end()) return make_error(status::unknown_sequence, "sequence " + std::to_string(seq));
    if (length > it->second.blocks * block_tokens_)
        return make_error(status::kv_full, "sequence " + std::to_string(seq) + " past its reservation");
    it->second.used_tokens = length;
    return {};
}

std::int64_t kv_pool::release(sequence_id seq) {
    auto it = held_.find(seq);
    if (it == held_.end()) return 0;
    std::int64_t blocks = it->second.blocks;
    free_blocks_ += blocks;
    held_.erase(it);
    return blocks;
}

void_result kv_pool::cache(sequence_id seq, std::int64_t tokens) {
    auto it = held_.find(seq);
    if (it == held_.end()) return make_error(status::unknown_sequence, "sequence " + std::to_string(seq));
    const std::int64_t keep = std::min(it->second.blocks, blocks_for(tokens));
    free_blocks_ += it->second.blocks - keep;
    it->second = holding{keep, tokens, true};
    return {};
}

bool kv_pool::is_cached(sequence_id seq) const {
    auto it = held_.find(seq);
    return it != held_.end() && it->second.cached;
}

std::int64_t kv_pool::cached_blocks() const {
    std::int64_t blocks = 0;
    for (const auto& [seq, h] : held_) blocks += h.cached ? h.blocks : 0;
    return blocks;
}

std::size_t kv_pool::cached_sequences() const {
    return std::size_t(std::count_if(held_.begin(), held_.end(), [](const auto& kv) { return kv.second.cached; }));
}

// Blocks holding a running sequence's tokens (cached ones are reported on their own).
std::int64_t kv_pool::used_blocks() const {
    std::int64_t used = 0;
    for (const auto& [seq, h] : held_) used += h.cached ? 0 : blocks_for(h.used_tokens);
    return used;
}

bool kv_pool::conserved() const {
    std::int64_t reserved = 0;
    for (const auto& [seq, h] : held_) {
        if (h.used_tokens > h.blocks * block_tokens_) return false;
        reserved += h.blocks;
    }
    return free_blocks_ >= 0 && free_blocks_ + reserved == total_blocks_;
}

}  // namespace calserve::actors
