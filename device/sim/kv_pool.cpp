// KV block accounting (see kv_pool.hpp).
#include "device/sim/kv_pool.hpp"

#include <algorithm>
#include <string>

namespace calserve::device::sim {

kv_pool::kv_pool(const kv_layout& layout)
    : block_tokens_(layout.block_tokens > 0 ? layout.block_tokens : 1),
      context_(layout.context),
      blocks_total_(layout.capacity_tokens() / (layout.block_tokens > 0 ? layout.block_tokens : 1)) {}

bool kv_pool::can_allocate(std::int64_t tokens) const {
    return tokens >= 0 && tokens <= context_ && blocks_for(tokens) <= blocks_total_ - blocks_used_;
}

void_result kv_pool::allocate(seq_id seq, std::int64_t reserve_tokens) {
    if (seqs_.contains(seq)) return make_error(status::sequence_exists, "KV sequence " + std::to_string(seq));
    if (reserve_tokens < 0 || reserve_tokens > context_)
        return make_error(status::context_overflow, "reserve " + std::to_string(reserve_tokens) + " tokens > context " +
                                                        std::to_string(context_));
    if (!can_allocate(reserve_tokens)) return make_error(status::kv_full, "no room for " + std::to_string(reserve_tokens) + " tokens");
    const std::int64_t blocks = blocks_for(reserve_tokens);
    seqs_.emplace(seq, blocks);
    blocks_used_ += blocks;
    return {};
}

void_result kv_pool::apply(seq_id seq, std::int64_t total_tokens) {
    auto it = seqs_.find(seq);
    if (it == seqs_.end()) return make_error(status::unknown_sequence, "KV sequence " + std::to_string(seq));
    if (total_tokens < 0 || total_tokens > context_)
        return make_error(status::context_overflow,
                          std::to_string(total_tokens) + " tokens > context " + std::to_string(context_));
    const std::int64_t need = blocks_for(total_tokens) - it->second;
    if (need <= 0) return {};
    if (need > blocks_total_ - blocks_used_)
        return make_error(status::kv_full, "sequence " + std::to_string(seq) + " needs " + std::to_string(need) +
                                               " more blocks, " + std::to_string(blocks_total_ - blocks_used_) + " free");
    it->second += need;
    blocks_used_ += need;
    return {};
}

void_result kv_pool::keep(seq_id seq, std::int64_t tokens) {
    auto it = seqs_.find(seq);
    if (it == seqs_.end()) return make_error(status::unknown_sequence, "KV sequence " + std::to_string(seq));
    const std::int64_t extra = it->second - blocks_for(std::max<std::int64_t>(0, tokens));
    if (extra <= 0) return {};
    it->second -= extra;
    blocks_used_ -= extra;
    return {};
}

void_result kv_pool::free(seq_id seq) {
    auto it = seqs_.find(seq);
    if (it == seqs_.end()) return make_error(status::unknown_sequence, "KV sequence " + std::to_string(seq));
    blocks_used_ -= it->second;
    seqs_.erase(it);
    return {};
}

void kv_pool::clear() {
    seqs_.clear();
    blocks_used_ = 0;
}

std::int64_t kv_pool::capacity_of(seq_id seq) const {
    auto it = seqs_.find(seq);
    return it == seqs_.end() ? 0 : it->second * block_tokens_;
}

kv_usage kv_pool::usage() const {
    return kv_usage{blocks_total_ * block_tokens_, block_tokens_, blocks_total_, blocks_used_,
                    static_cast<std::int64_t>(seqs_.size())};
}

}  // namespace calserve::device::sim
