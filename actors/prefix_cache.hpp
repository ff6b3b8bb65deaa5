#pragma once
//! Prefix cache index (pure, no actor): which finished sequences' device KV can
//! serve a new prompt's first tokens. The KvManager applies it.
//!
//! Reuse is by seq copy (docs/decisions.md, "KV reuse by seq copy"): a finished
//! sequence's KV stays on the device, truncated (seq keep) to whole cache blocks
//! of `block_tokens`, as one *entry*; a prompt whose first blocks equal an
//! entry's gets them copied into its own sequence and prefills only the rest.
//!
//! Keys: block i of a token run has the key
//!   h(i) = XXH3-64(XXH3-64(tokens of block i), seed h(i-1)),  h(-1) = the scope
//!   (XXH3-128 of the serving package and the request's cache_salt, folded to a seed),
//! so a key names the whole prefix up to its block, and the scope keeps tenants
//! and packages apart. A hit compares the tokens of the whole prefix with the
//! entry's, so a key collision (about 2^-64 per pair of blocks) can only make a
//! lookup miss, never serve wrong KV. A lookup walks the entries that hold the
//! prompt, comparing tokens and taking their keys where they agree, so it hashes
//! only where the prompt leaves one entry for another: a 32k-token turn of a cached
//! conversation costs microseconds (docs/performance.md).
//!
//! Eviction: least recently used first (an entry is used when inserted or hit).
//! Entries that are a prefix of a newer entry are redundant: insert returns them
//! to be freed.
//!
//! Running entries: a sequence that is still running may index its prompt's whole
//! blocks as soon as its prefill has written them (insert with `running`), so
//! requests that arrive while it runs (the other choices of an `n > 1` request, a
//! shared system prompt under concurrency) copy its KV instead of prefilling it.
//! Its KV is the sequence's own, not the cache's: a running entry is never evicted
//! nor returned to be freed; it leaves the index when its sequence is released
//! (then, like any finished sequence, it may be kept) or the device is reset.
//!
//! Invariants: every entry's tokens are a whole number of blocks; every key in the
//! index names an entry holding that prefix.
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/container/small_vector.hpp>
#include <boost/unordered/unordered_flat_map.hpp>

namespace calserve::actors {

using sequence_id = std::uint64_t;

// 128-bit key of a scope or of a prefix ending at a block.
struct cache_key {
    std::uint64_t lo = 0, hi = 0;
    friend bool operator==(const cache_key&, const cache_key&) = default;
};

// The scope of a package (its content hash) and a request's cache_salt.
cache_key cache_scope(std::string_view package_hash, std::string_view salt);

class prefix_cache {
public:
    using token = std::int32_t;

    // `key_mask`: the bits of a key kept (tests: a narrow mask makes key collisions
    // common, to show that they can only make a lookup miss).
    explicit prefix_cache(std::int64_t block_tokens, std::uint64_t key_mask = ~std::uint64_t(0));

    std::int64_t block_tokens() const { return block_tokens_; }
    // Keys of the first `blocks` whole blocks of `tokens` under `scope`.
    std::vector<cache_key> keys(const cache_key& scope, std::span<const token> tokens, std::int64_t blocks) const;
    // The key of the block after `parent` holding `block` (block_tokens tokens).
    cache_key next_key(const cache_key& parent, std::span<const token> block) const;

    struct hit {
        sequence_id source = 0;   // the entry's device sequence
        std::int64_t tokens = 0;  // whole blocks, <= the limit asked
    };
    // What a lookup learnt about a run, for the insert of the same run later (a prompt's
    // share once prefilled), so nothing is hashed or compared twice: the keys of the blocks
    // it hashed (a prefix of the run's chain) and the entry whose tokens it found equal to
    // the run's first ones. It holds the run, so "the same run" is a pointer comparison
    // that stays true: a held run cannot be freed and its address reused.
    struct lookup_trace {
        std::vector<cache_key> keys;
        std::shared_ptr<const std::vector<token>> run;
        sequence_id equal = 0;           // the hit's entry (0: none) ...
        std::uint64_t equal_serial = 0;  // ... in this incarnation of it ...
        std::size_t equal_tokens = 0;    // ... compared over this many tokens
    };

    // The longest cached prefix of `tokens` of at most `limit` tokens (whole blocks);
    // marks the entry used. Nothing when no block matches.
    std::optional<hit> lookup(const cache_key& scope, std::span<const token> tokens, std::int64_t limit);
    // The same for `run`, filling `trace` for a later insert of that run.
    std::optional<hit> lookup(const cache_key& scope, std::shared_ptr<const std::vector<token>> run, std::int64_t limit,
                              lookup_trace& trace);
    // Tests: lookups only probe (the way that assumes nothing of the entries; the walk is
    // checked against it).
    void probe_only(bool on) { probe_only_ = on; }

    // `seq`'s device KV holding `tokens` (a whole number of blocks, > 0) becomes an
    // entry. Returns entries made redundant by it (a prefix of it): the caller frees
    // them. An entry equal to an existing one is not added: it is returned itself.
    // `running`: the sequence still runs and owns its KV (see above); redundant running
    // entries leave the index but are never returned. `trace`: what a lookup of the same
    // run found (keys hashed, an entry compared), so only the rest is hashed and compared
    // (ignored for another run). A kept insert of a
    // sequence whose running entry it extends promotes that entry in place: only the
    // new blocks are hashed and indexed (the caller passes that sequence's own tokens,
    // its prompt first; only the prompt's last block is compared). The entry shares `run`
    // (the message's own vector, not a copy); its first `n` tokens are what the KV holds.
    std::vector<sequence_id> insert(sequence_id seq, const cache_key& scope, std::shared_ptr<const std::vector<token>> run,
                                    std::size_t n, bool running = false, const lookup_trace* trace = nullptr);
    std::vector<sequence_id> insert(sequence_id seq, const cache_key& scope, std::vector<token> tokens,
                                    bool running = false) {
        const auto n = tokens.size();
        return insert(seq, scope, std::make_shared<const std::vector<token>>(std::move(tokens)), n, running);
    }

    // Room in the index for `keys` block keys (at most one per cache block of KV).
    void reserve(std::size_t keys) { index_.reserve(keys); }

    // The least recently used kept (not running) entry other than `keep`, removed;
    // nothing when none.
    std::optional<sequence_id> evict_lru(sequence_id keep = 0);
    // Removes one entry (unknown ids ignored); returns whether it was there.
    bool erase(sequence_id seq);
    // Removes every entry; returns the kept ones' sequences (their KV is the cache's).
    std::vector<sequence_id> clear();

    bool contains(sequence_id seq) const { return entries_.contains(seq); }
    bool running(sequence_id seq) const;
    std::size_t entries() const { return entries_.size(); }
    std::size_t kept_entries() const { return entries_.size() - running_; }
    std::size_t running_entries() const { return running_; }
    std::int64_t tokens_of(sequence_id seq) const;
    // Tokens compared with entries so far (the guard against key collisions; tests and
    // benchmarks: a share after a traced lookup compares nothing again).
    std::uint64_t compared_tokens() const { return compared_; }
    // Every index key names a live entry whose tokens produce it (tests, soak).
    bool consistent() const;

private:
    struct key_hash {
        std::size_t operator()(const cache_key& k) const { return static_cast<std::size_t>(k.lo); }
    };
    struct entry {
        cache_key scope;
        std::shared_ptr<const std::vector<token>> run;  // shared with the message that brought it
        std::span<const token> tokens;                  // its first whole blocks: what the KV holds
        std::vector<cache_key> keys;            // one per block
        std::list<sequence_id>::iterator lru;   // position in lru_ (front = least recent)
        bool running = false;                   // a running sequence's prompt: never evicted or freed here
        std::uint64_t serial = 0;               // unique per insert (a lookup_trace names an incarnation)
    };
    // One entry holding a key's prefix; `last`: the key is the entry's last block's.
    struct holder {
        sequence_id seq = 0;
        bool last = false;
    };
    using holders = boost::container::small_vector<holder, 2>;

    void unindex(sequence_id seq, const entry& e);
    // Indexes `seq`'s keys from `from` on (its last key marked).
    void index_from(sequence_id seq, const std::vector<cache_key>& keys, std::size_t from);
    // `seq` (a new entry with `keys`) takes over the index places of `old`, an entry whose
    // run is a prefix of its own, which leaves the cache: the places prefixes_of found, instead of
    // an erase and an insert. `places[i]`: the holders of keys[i] (from prefixes_of).
    void hand_over(sequence_id old, sequence_id seq, const std::vector<cache_key>& keys,
                   const std::vector<holders*>& places);
    // Appends the keys of `tokens`' blocks from chain.size() up to `blocks` (the one place
    // block keys are chained).
    void extend_chain(const cache_key& scope, std::span<const token> tokens, std::int64_t blocks,
                      std::vector<cache_key>& chain) const;
    // Keys of the first `blocks` whole blocks of `tokens`, starting from `known` ones.
    std::vector<cache_key> chain_of(const cache_key& scope, std::span<const token> tokens, std::int64_t blocks,
                                    std::span<const cache_key> known) const;
    // Entries (other than `seq`) holding exactly the tokens up to one of `keys`: a prefix of `tokens`.
    // `places` (optional) receives each key's holders (null when not indexed).
    // `trace`: a lookup's finding that one entry equals the tokens' first ones (not compared again).
    std::vector<sequence_id> prefixes_of(sequence_id seq, const cache_key& scope, std::span<const token> tokens,
                                         std::span<const cache_key> keys, std::vector<holders*>* places = nullptr,
                                         const lookup_trace* trace = nullptr);
    // The longest cached prefix (see lookup): `walk`, or `probe` when the walk meets a
    // collision. `chain` receives keys of the prompt's first blocks.
    std::optional<hit> find_longest(const cache_key& scope, std::span<const token> tokens, std::int64_t limit,
                                    std::vector<cache_key>& chain, lookup_trace* trace);
    struct walk_result {
        bool collision = false;    // a key's holder disagreed with the prompt: probe instead
        std::optional<hit> found;  // otherwise the hit, or nothing (a miss)
    };
    walk_result walk(const cache_key& scope, std::span<const token> tokens, std::int64_t blocks,
                     std::vector<cache_key>& chain, lookup_trace* trace);
    std::optional<hit> probe(const cache_key& scope, std::span<const token> tokens, std::int64_t blocks,
                             std::vector<cache_key>& chain, lookup_trace* trace);
    hit found(sequence_id seq, entry& e, std::int64_t n, lookup_trace* trace);
    // Another entry holds all of `tokens` (ending at key `last`): marks it used.
    bool held_elsewhere(sequence_id seq, const cache_key& scope, std::span<const token> tokens, const cache_key& last);
    std::vector<sequence_id> promote(sequence_id seq, std::shared_ptr<const std::vector<token>> run,
                                     std::span<const token> tokens);
    void touch(entry& e);

    std::int64_t block_tokens_;
    std::uint64_t key_mask_;
    bool probe_only_ = false;
    std::unordered_map<sequence_id, entry> entries_;
    // Key -> entries holding that prefix (most recent last; usually one: an entry that is a
    // prefix of another is dropped, so only branches share keys). Flat: a 32k-token prompt
    // is 512 keys, looked up and inserted per request.
    boost::unordered_flat_map<cache_key, holders, key_hash> index_;
    std::list<sequence_id> lru_;
    std::size_t running_ = 0;  // entries with `running`
    std::uint64_t serials_ = 0;  // the last entry's serial
    std::uint64_t compared_ = 0;
};

}  // namespace calserve::actors
