#include "actors/prefix_cache.hpp"

#include <xxh_x86dispatch.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace calserve::actors {

namespace {
cache_key from(XXH128_hash_t h) { return cache_key{h.low64, h.high64}; }
}  // namespace

cache_key cache_scope(std::string_view package_hash, std::string_view salt) {
    // Lengths first, so no two (package, salt) pairs give the same bytes.
    std::string bytes = std::to_string(package_hash.size()) + ":" + std::to_string(salt.size()) + ":";
    bytes.append(package_hash).append(salt);
    return from(XXH3_128bits(bytes.data(), bytes.size()));
}

prefix_cache::prefix_cache(std::int64_t block_tokens, std::uint64_t key_mask)
    : block_tokens_(std::max<std::int64_t>(1, block_tokens)), key_mask_(key_mask) {}

cache_key prefix_cache::next_key(const cache_key& parent, std::span<const token> block) const {
    // The block's content hash with the library's default secret, through its runtime
    // dispatch (AVX-512/AVX2 where the CPU has them), then 8 bytes mixed with the parent's
    // key. A seeded hash of the block itself would derive a new secret from the seed on
    // every call (XXH3 does for inputs over 240 bytes; a 64-token block is 256), which
    // cost more than hashing the block. One pass over the block per key; 64 bits of key
    // are enough because a hit compares the tokens: a collision can only make a lookup miss.
    const std::uint64_t content = XXH3_64bits_dispatch(block.data(), block.size_bytes());
    const std::uint64_t h = XXH3_64bits_withSeed(&content, sizeof content, parent.lo ^ parent.hi);
    return cache_key{h & key_mask_, 0};
}

// The one computation of a run's chained block keys: each block's key from its
// parent's (the scope's for block 0).
void prefix_cache::extend_chain(const cache_key& scope, std::span<const token> tokens, std::int64_t blocks,
                                std::vector<cache_key>& chain) const {
    for (auto b = std::int64_t(chain.size()); b < blocks; ++b)
        chain.push_back(next_key(b == 0 ? scope : chain.back(),
                                 tokens.subspan(std::size_t(b * block_tokens_), std::size_t(block_tokens_))));
}

std::vector<cache_key> prefix_cache::keys(const cache_key& scope, std::span<const token> tokens,
                                          std::int64_t blocks) const {
    return chain_of(scope, tokens, blocks, {});
}

std::optional<prefix_cache::hit> prefix_cache::lookup(const cache_key& scope, std::span<const token> tokens,
                                                      std::int64_t limit) {
    std::vector<cache_key> chain;
    return find_longest(scope, tokens, limit, chain, nullptr);
}

std::optional<prefix_cache::hit> prefix_cache::lookup(const cache_key& scope,
                                                      std::shared_ptr<const std::vector<token>> run, std::int64_t limit,
                                                      lookup_trace& trace) {
    trace = lookup_trace{};
    trace.run = std::move(run);
    if (!trace.run) return std::nullopt;
    return find_longest(scope, *trace.run, limit, trace.keys, &trace);
}

std::optional<prefix_cache::hit> prefix_cache::find_longest(const cache_key& scope, std::span<const token> tokens,
                                                            std::int64_t limit, std::vector<cache_key>& chain,
                                                            lookup_trace* trace) {
    chain.clear();
    if (entries_.empty()) return std::nullopt;
    const std::int64_t blocks = std::min<std::int64_t>(limit, std::int64_t(tokens.size())) / block_tokens_;
    if (blocks == 0) return std::nullopt;
    chain.reserve(std::size_t(blocks));
    if (!probe_only_) {
        auto walked = walk(scope, tokens, blocks, chain, trace);
        if (!walked.collision) return walked.found;
    }
    chain.clear();
    return probe(scope, tokens, blocks, chain, trace);
}

prefix_cache::hit prefix_cache::found(sequence_id seq, entry& e, std::int64_t n, lookup_trace* trace) {
    touch(e);
    if (trace) {
        trace->equal = seq;
        trace->equal_serial = e.serial;
        trace->equal_tokens = std::size_t(n);
    }
    return hit{seq, n};
}

// Follows the prompt through the entries that hold it: the most recent entry holding the
// key of the prompt's first unmatched block is compared with the prompt for as long as
// they agree, and its keys serve for the blocks they share (equal tokens under one scope
// have equal keys). The prompt is hashed only where it leaves one entry for another and
// read by memcmp elsewhere: a 32k-token turn of a cached conversation costs one
// comparison and a hash or two, not 512 hashes. Nothing (not a miss) when a key's holder
// disagrees with the prompt, which only a collision does (`collision`): the caller then probes.
prefix_cache::walk_result prefix_cache::walk(const cache_key& scope, std::span<const token> tokens, std::int64_t blocks,
                                             std::vector<cache_key>& chain, lookup_trace* trace) {
    constexpr walk_result collision{true, std::nullopt};
    const auto b_tokens = std::size_t(block_tokens_);
    auto same = [&](const entry& e, std::int64_t from, std::int64_t to) {  // blocks [from, to) equal
        const auto n = std::size_t(to - from) * b_tokens;
        compared_ += n;
        return std::memcmp(e.tokens.data() + std::size_t(from) * b_tokens, tokens.data() + std::size_t(from) * b_tokens,
                           n * sizeof(token)) == 0;
    };
    extend_chain(scope, tokens, 1, chain);
    std::int64_t p = 0;         // blocks matched; chain[p] is block p's key
    sequence_id walked = 0;     // the entry followed last, compared with the prompt ...
    std::int64_t walked_from = 0;  // ... from this block on (before it, only its keys were)
    while (p < blocks) {
        auto it = index_.find(chain[std::size_t(p)]);
        if (it == index_.end()) break;
        auto h = std::find_if(it->second.rbegin(), it->second.rend(),
                              [&](const holder& x) { return entries_.at(x.seq).scope == scope; });
        if (h == it->second.rend()) break;
        const entry& e = entries_.at(h->seq);
        const std::int64_t end = std::min<std::int64_t>(blocks, std::int64_t(e.tokens.size() / b_tokens));
        if (end <= p) return collision;  // it holds the key and has no block p
        std::int64_t q = end;
        if (!same(e, p, end)) {  // where they part: block by block
            q = p;
            while (q < end && same(e, q, q + 1)) ++q;
        }
        if (q == p) return collision;  // its key matched and its block did not
        chain.insert(chain.end(), e.keys.begin() + std::ptrdiff_t(p + 1), e.keys.begin() + std::ptrdiff_t(q));
        walked = h->seq;
        walked_from = p;
        p = q;
        extend_chain(scope, tokens, std::min(p + 1, blocks), chain);
    }
    if (p == 0) return {};  // a miss; chain holds block 0's key
    // The hit is the one the probe picks: the most recent holder of the longest key whose
    // tokens equal the prompt's. The walked entry was compared from `walked_from` on.
    auto& at = index_.find(chain[std::size_t(p - 1)])->second;
    for (auto s = at.rbegin(); s != at.rend(); ++s) {
        entry& e = entries_.at(s->seq);
        if (e.scope != scope || std::int64_t(e.tokens.size() / b_tokens) < p ||
            !same(e, 0, s->seq == walked ? walked_from : p))
            continue;
        // Its tokens are the prompt's: so are its keys (the walk's came partly from others).
        chain.assign(e.keys.begin(), e.keys.begin() + std::ptrdiff_t(p));
        return {false, found(s->seq, e, p * block_tokens_, trace)};
    }
    return collision;
}

// Assumes nothing of the entries: keys name whole prefixes and every entry indexes all of
// its blocks, so the cached blocks of a prompt are a prefix of its chain ("block b's key is
// indexed" holds up to the longest match and not after). The index is probed at blocks 0,
// 1, 3, 7, ... until a probe misses, then the longest match is found by bisection between
// the last hit and that miss, hashing the chain as far as the probes go. (A key indexed by
// a collision can only make the final token comparison fail: a miss.)
std::optional<prefix_cache::hit> prefix_cache::probe(const cache_key& scope, std::span<const token> tokens,
                                                     std::int64_t blocks, std::vector<cache_key>& chain,
                                                     lookup_trace* trace) {
    auto key_of = [&](std::int64_t b) -> const cache_key& {
        extend_chain(scope, tokens, b + 1, chain);
        return chain[std::size_t(b)];
    };
    auto indexed = [&](std::int64_t b) { return index_.find(key_of(b)); };
    std::int64_t hit_at = -1;    // longest block known indexed
    std::int64_t miss_at = blocks;  // shortest block known not indexed (or past the end)
    for (std::int64_t probe = 0; probe < blocks; probe = probe * 2 + 1) {
        if (indexed(probe) == index_.end()) {
            miss_at = probe;
            break;
        }
        hit_at = probe;
    }
    if (hit_at < 0) return std::nullopt;
    while (miss_at - hit_at > 1) {
        const std::int64_t mid = hit_at + (miss_at - hit_at) / 2;
        (indexed(mid) == index_.end() ? miss_at : hit_at) = mid;
    }
    const auto& at = indexed(hit_at)->second;
    const std::int64_t n = (hit_at + 1) * block_tokens_;
    for (auto source = at.rbegin(); source != at.rend(); ++source) {
        entry& e = entries_.at(source->seq);
        // The tokens are compared too: a key collision can only miss, never serve wrong KV.
        if (e.scope != scope || std::int64_t(e.tokens.size()) < n) continue;  // shorter: a collision
        compared_ += std::uint64_t(n);
        if (std::memcmp(e.tokens.data(), tokens.data(), std::size_t(n) * sizeof(token)) == 0)
            return found(source->seq, e, n, trace);
    }
    return std::nullopt;
}

std::vector<cache_key> prefix_cache::chain_of(const cache_key& scope, std::span<const token> tokens,
                                              std::int64_t blocks, std::span<const cache_key> known) const {
    blocks = std::max<std::int64_t>(0, std::min(blocks, std::int64_t(tokens.size()) / block_tokens_));
    std::vector<cache_key> chain(known.begin(), known.begin() + std::min<std::int64_t>(std::int64_t(known.size()), blocks));
    chain.reserve(std::size_t(blocks));
    extend_chain(scope, tokens, blocks, chain);
    return chain;
}

bool prefix_cache::held_elsewhere(sequence_id seq, const cache_key& scope, std::span<const token> tokens,
                                  const cache_key& last) {
    auto it = index_.find(last);
    if (it == index_.end()) return false;
    for (const auto& h : it->second) {
        if (h.seq == seq) continue;
        entry& o = entries_.at(h.seq);
        if (o.scope != scope || o.tokens.size() < tokens.size()) continue;
        compared_ += tokens.size();
        if (std::equal(tokens.begin(), tokens.end(), o.tokens.begin())) {
            touch(o);
            return true;
        }
    }
    return false;
}

std::vector<sequence_id> prefix_cache::prefixes_of(sequence_id seq, const cache_key& scope, std::span<const token> tokens,
                                                   std::span<const cache_key> keys, std::vector<holders*>* places,
                                                   const lookup_trace* trace) {
    // The entry a lookup of these very tokens found equal over its whole length is not
    // compared again (a 32k-token prompt's share would read 128 KB twice).
    auto known_equal = [&](sequence_id s, const entry& o) {
        return trace && trace->run && trace->run->data() == tokens.data() && s == trace->equal &&
               o.serial == trace->equal_serial && o.tokens.size() == trace->equal_tokens;
    };
    std::vector<sequence_id> out;
    if (places) places->assign(keys.size(), nullptr);
    for (std::size_t i = 0; i < keys.size(); ++i) {
        auto it = index_.find(keys[i]);
        if (it == index_.end()) continue;
        if (places) (*places)[i] = &it->second;
        for (const auto& h : it->second) {
            // Only entries ending here can be a prefix ending here; each is found once (a key
            // can repeat along a run only by a collision).
            if (!h.last || h.seq == seq || std::find(out.begin(), out.end(), h.seq) != out.end()) continue;
            const entry& o = entries_.at(h.seq);
            if (o.scope != scope || o.tokens.size() > tokens.size()) continue;
            if (known_equal(h.seq, o)) {
                out.push_back(h.seq);
                continue;
            }
            compared_ += o.tokens.size();
            if (std::equal(o.tokens.begin(), o.tokens.end(), tokens.begin())) out.push_back(h.seq);
        }
    }
    return out;
}

std::vector<sequence_id> prefix_cache::insert(sequence_id seq, const cache_key& scope,
                                              std::shared_ptr<const std::vector<token>> run, std::size_t n, bool running,
                                              const lookup_trace* trace) {
    if (trace && trace->run != run) trace = nullptr;  // another run's findings say nothing of this one
    n = std::min(n, run ? run->size() : 0);
    const auto blocks = std::int64_t(n) / block_tokens_;
    if (blocks == 0) return {seq};
    const std::span<const token> tokens(run->data(), std::size_t(blocks * block_tokens_));
    if (auto it = entries_.find(seq); it != entries_.end()) {
        // Its own running entry (the same sequence's prompt) extended: the tokens after the
        // prompt are the sequence's own, so its last block is checked, not the whole run.
        const entry& e = it->second;
        const auto tail = e.tokens.size() - std::size_t(block_tokens_);
        compared_ += std::uint64_t(block_tokens_);
        if (running || !e.running || e.scope != scope || e.tokens.size() > tokens.size() ||
            !std::equal(e.tokens.begin() + std::ptrdiff_t(tail), e.tokens.end(), tokens.begin() + std::ptrdiff_t(tail)))
            return {seq};
        return promote(seq, std::move(run), tokens);
    }
    auto chain = chain_of(scope, tokens, blocks, trace ? std::span<const cache_key>(trace->keys) : std::span<const cache_key>{});
    // An entry that already holds all of it makes this one redundant.
    if (held_elsewhere(seq, scope, tokens, chain.back())) return {seq};
    // Entries whose whole run is a prefix of this one are redundant; a running entry's KV
    // is its sequence's: it only leaves the index.
    // `places`: the holders of each key, found once here for the hand-over below.
    std::vector<holders*> places;
    auto redundant = prefixes_of(seq, scope, tokens, chain, &places, trace);
    // The longest of them hands its index places over (usually the only one: the previous
    // turn of this conversation); the others leave the index, after it (until then every
    // place it holds is still indexed, so `places` stays valid).
    sequence_id longest = 0;
    for (auto r : redundant)
        if (longest == 0 || entries_.at(r).tokens.size() > entries_.at(longest).tokens.size()) longest = r;
    std::size_t handed = 0;
    if (longest != 0) {
        const entry& o = entries_.at(longest);
        handed = o.keys.size();
        hand_over(longest, seq, chain, places);
        if (o.running) --running_;
        lru_.erase(o.lru);
    }
    std::erase_if(redundant, [&](sequence_id r) {
        const bool owned_elsewhere = entries_.at(r).running;
        if (r == longest) {
            entries_.erase(r);
        } else {
            erase(r);
        }
        return owned_elsewhere;
    });
    index_from(seq, chain, handed);
    entry e{scope, std::move(run), tokens, std::move(chain), lru_.insert(lru_.end(), seq), running, ++serials_};
    entries_.emplace(seq, std::move(e));
    if (running) ++running_;
    return redundant;
}

// A running entry becomes kept, extended to `tokens` (which start with its own): its keys
// stay indexed; only the blocks after them are hashed, checked and indexed.
std::vector<sequence_id> prefix_cache::promote(sequence_id seq, std::shared_ptr<const std::vector<token>> run,
                                               std::span<const token> tokens) {
    entry& e = entries_.at(seq);
    const auto old_blocks = e.keys.size();
    auto chain = chain_of(e.scope, tokens, std::int64_t(tokens.size()) / block_tokens_, e.keys);
    const std::span<const cache_key> added(chain.begin() + std::ptrdiff_t(old_blocks), chain.end());
    if (held_elsewhere(seq, e.scope, tokens, chain.back())) {
        erase(seq);
        return {seq};
    }
    auto redundant = prefixes_of(seq, e.scope, tokens, added);
    std::erase_if(redundant, [this](sequence_id r) {
        const bool owned_elsewhere = entries_.at(r).running;
        erase(r);
        return owned_elsewhere;
    });
    entry& kept = entries_.at(seq);  // still there: only other entries were erased
    if (!added.empty()) {
        for (auto& h : index_.find(chain[old_blocks - 1])->second)
            if (h.seq == seq) h.last = false;
        index_from(seq, chain, old_blocks);
    }
    kept.keys = std::move(chain);
    kept.run = std::move(run);
    kept.tokens = tokens;
    kept.running = false;
    --running_;
    touch(kept);
    return redundant;
}

void prefix_cache::touch(entry& e) { lru_.splice(lru_.end(), lru_, e.lru); }

void prefix_cache::unindex(sequence_id seq, const entry& e) {
    for (const auto& k : e.keys) {
        auto it = index_.find(k);
        if (it == index_.end()) continue;
        auto& at = it->second;
        at.erase(std::remove_if(at.begin(), at.end(), [seq](const holder& h) { return h.seq == seq; }), at.end());
        if (at.empty()) index_.erase(it);
    }
}

void prefix_cache::index_from(sequence_id seq, const std::vector<cache_key>& keys, std::size_t from) {
    for (std::size_t i = from; i < keys.size(); ++i) index_[keys[i]].push_back({seq, i + 1 == keys.size()});
}

void prefix_cache::hand_over(sequence_id old, sequence_id seq, const std::vector<cache_key>& keys,
                             const std::vector<holders*>& places) {
    const auto n = entries_.at(old).keys.size();  // a prefix of `keys`: the same first n keys
    for (std::size_t i = 0; i < n; ++i) {
        auto& at = *places[i];
        auto h = std::find_if(at.begin(), at.end(), [old](const holder& x) { return x.seq == old; });
        std::rotate(h, h + 1, at.end());  // most recent last
        at.back() = {seq, i + 1 == keys.size()};
    }
}

std::optional<sequence_id> prefix_cache::evict_lru(sequence_id keep) {
    for (auto seq : lru_) {
        if (seq == keep || entries_.at(seq).running) continue;
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
    if (it->second.running) --running_;
    entries_.erase(it);
    return true;
}

std::vector<sequence_id> prefix_cache::clear() {
    std::vector<sequence_id> out;
    for (auto seq : lru_)
        if (!entries_.at(seq).running) out.push_back(seq);
    entries_.clear();
    index_.clear();
    lru_.clear();
    running_ = 0;
    return out;
}

bool prefix_cache::running(sequence_id seq) const {
    auto it = entries_.find(seq);
    return it != entries_.end() && it->second.running;
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
        // One holder per position of a key in the entry (a key can repeat within an entry
        // only by a collision), the one of its last block marked.
        for (std::size_t i = 0; i < e.keys.size(); ++i) {
            auto it = index_.find(e.keys[i]);
            if (it == index_.end()) return false;
            const auto positions = std::count(e.keys.begin(), e.keys.end(), e.keys[i]);
            const auto held = std::count_if(it->second.begin(), it->second.end(), [seq](const holder& x) { return x.seq == seq; });
            const auto marked = std::count_if(it->second.begin(), it->second.end(),
                                              [seq](const holder& x) { return x.seq == seq && x.last; });
            if (held != positions || marked != (e.keys[i] == e.keys.back() ? 1 : 0)) return false;
        }
        keys += e.keys.size();
    }
    std::size_t indexed = 0;
    for (const auto& [k, seqs] : index_) indexed += seqs.size();
    const auto running = std::size_t(std::count_if(entries_.begin(), entries_.end(), [](const auto& kv) {
        return kv.second.running;
    }));
    return indexed == keys && lru_.size() == entries_.size() && running == running_;
}

}  // namespace calserve::actors
