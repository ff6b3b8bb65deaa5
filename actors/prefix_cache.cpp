#include "actors/prefix_cache.hpp"

// The state on the stack (no allocation per lookup) needs the static-linking declarations.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace calserve::actors {

namespace {
cache_key from(XXH128_hash_t h) { return cache_key{h.low64, h.high64}; }
}  // namespace

cache_key cache_scope(std::string_view package_hash, std::string_view salt) {
    XXH3_state_t state;
    XXH3_128bits_reset(&state);
    const std::uint64_t lengths[2] = {package_hash.size(), salt.size()};  // no two (hash, salt) pairs concatenate alike
    XXH3_128bits_update(&state, lengths, sizeof lengths);
    XXH3_128bits_update(&state, package_hash.data(), package_hash.size());
    XXH3_128bits_update(&state, salt.data(), salt.size());
    return from(XXH3_128bits_digest(&state));
}

prefix_cache::prefix_cache(std::int64_t block_tokens) : block_tokens_(std::max<std::int64_t>(1, block_tokens)) {}

std::vector<cache_key> prefix_cache::keys(const cache_key& scope, std::span<const token> tokens,
                                          std::int64_t blocks) const {
    blocks = std::min(blocks, std::int64_t(tokens.size()) / block_tokens_);
    std::vector<cache_key> out;
    out.reserve(std::size_t(std::max<std::int64_t>(0, blocks)));
    cache_key parent = scope;
    XXH3_state_t state;
    for (std::int64_t b = 0; b < blocks; ++b) {
        XXH3_128bits_reset(&state);
        XXH3_128bits_update(&state, &parent, sizeof parent);
        XXH3_128bits_update(&state, tokens.data() + b * block_tokens_, std::size_t(block_tokens_) * sizeof(token));
        parent = from(XXH3_128bits_digest(&state));
        out.push_back(parent);
    }
    return out;
}

std::optional<prefix_cache::hit> prefix_cache::lookup(const cache_key& scope, std::span<const token> tokens,
                                                      std::int64_t limit) {
    if (entries_.empty()) return std::nullopt;
    const auto chain = keys(scope, tokens, std::min<std::int64_t>(limit, std::int64_t(tokens.size())) / block_tokens_);
    // Keys name whole prefixes, so the matched blocks form a prefix of the chain: the
    // longest one found is the answer.
    for (auto b = std::int64_t(chain.size()) - 1; b >= 0; --b) {
        auto it = index_.find(chain[std::size_t(b)]);
        if (it == index_.end()) continue;
        const std::int64_t n = (b + 1) * block_tokens_;
        for (auto source = it->second.rbegin(); source != it->second.rend(); ++source) {
            entry& e = entries_.at(*source);
            if (e.scope == scope && std::memcmp(e.tokens.data(), tokens.data(), std::size_t(n) * sizeof(token)) == 0) {
                touch(e);
                return hit{*source, n};
            }
        }
    }
    return std::nullopt;
}

std::vector<sequence_id> prefix_cache::insert(sequence_id seq, const cache_key& scope, std::vector<token> tokens) {
    std::vector<sequence_id> redundant;
    const auto blocks = std::int64_t(tokens.size()) / block_tokens_;
    if (blocks == 0 || entries_.contains(seq)) return {seq};
    tokens.resize(std::size_t(blocks * block_tokens_));
    auto chain = keys(scope, tokens, blocks);
    // An entry that already holds all of it makes this one redundant.
    if (auto it = index_.find(chain.back()); it != index_.end()) {
        for (auto other : it->second) {
            const entry& o = entries_.at(other);
            if (o.scope == scope && std::equal(tokens.begin(), tokens.end(), o.tokens.begin())) {
                touch(entries_.at(other));
                return {seq};
            }
        }
    }
    // Entries whose whole run is a prefix of this one are redundant.
    for (const auto& k : chain) {
        auto it = index_.find(k);
        if (it == index_.end()) continue;
        for (auto other : it->second) {
            const entry& o = entries_.at(other);
            if (o.keys.back() == k && o.scope == scope &&
                std::equal(o.tokens.begin(), o.tokens.end(), tokens.begin()))
                redundant.push_back(other);
        }
    }
    for (auto r : redundant) erase(r);
    entry e{scope, std::move(tokens), std::move(chain), lru_.insert(lru_.end(), seq)};
    for (const auto& k : e.keys) index_[k].push_back(seq);
    entries_.emplace(seq, std::move(e));
    return redundant;
}

void prefix_cache::touch(entry& e) { lru_.splice(lru_.end(), lru_, e.lru); }

void prefix_cache::unindex(sequence_id seq, const entry& e) {
    for (const auto& k : e.keys) {
        auto it = index_.find(k);
        if (it == index_.end()) continue;
        std::erase(it->second, seq);
        if (it->second.empty()) index_.erase(it);
    }
}

std::optional<sequence_id> prefix_cache::evict_lru(sequence_id keep) {
    for (auto seq : lru_) {
        if (seq == keep) continue;
        erase(seq);
        return seq;
    }
    return std::nullopt;
}

bool prefix_cache::erase(sequence_id seq) {
    auto it = entries_.find(seq);
    if (it == entries_.end()) return false;
    unindex(seq, it->second);
    lru_.erase(it->second.lru);
    entries_.erase(it);
    return true;
}

std::vector<sequence_id> prefix_cache::clear() {
    std::vector<sequence_id> out(lru_.begin(), lru_.end());
    entries_.clear();
    index_.clear();
    lru_.clear();
    return out;
}

std::int64_t prefix_cache::tokens_of(sequence_id seq) const {
    auto it = entries_.find(seq);
    return it == entries_.end() ? 0 : std::int64_t(it->second.tokens.size());
}

bool prefix_cache::consistent() const {
    std::size_t keys = 0;
    for (const auto& [seq, e] : entries_) {
        if (e.tokens.empty() || std::int64_t(e.tokens.size()) % block_tokens_ != 0) return false;
        if (e.keys != this->keys(e.scope, e.tokens, std::int64_t(e.tokens.size()) / block_tokens_)) return false;
        for (const auto& k : e.keys) {
            auto it = index_.find(k);
            if (it == index_.end() || std::find(it->second.begin(), it->second.end(), seq) == it->second.end())
                return false;
        }
        keys += e.keys.size();
    }
    std::size_t indexed = 0;
    for (const auto& [k, seqs] : index_) indexed += seqs.size();
    return indexed == keys && lru_.size() == entries_.size();
}

}  // namespace calserve::actors
