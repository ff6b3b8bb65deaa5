// The prefix cache index alone (actors/prefix_cache.hpp): chained block keys,
// longest-prefix lookup in whole blocks under a limit, scopes that never share,
// least-recently-used eviction, redundant prefix entries, and the index's
// consistency after every step of a random workload.
#include <catch2/catch.hpp>

#include <map>
#include <numeric>
#include <random>
#include <set>

#include "actors/prefix_cache.hpp"

using namespace calserve::actors;

namespace {
std::vector<prefix_cache::token> run(std::int32_t from, std::size_t n) {
    std::vector<prefix_cache::token> t(n);
    std::iota(t.begin(), t.end(), from);
    return t;
}
const cache_key k_scope = cache_scope("package-a", "");
}  // namespace

TEST_CASE("prefix cache: keys chain every block to its parent, under a scope", "[actors][prefix_cache]") {
    prefix_cache c(4);
    auto a = run(0, 12);
    auto keys = c.keys(k_scope, a, 3);
    REQUIRE(keys.size() == 3);
    auto b = a;
    b[1] = 99;  // only the first block differs: every later key differs too
    auto other = c.keys(k_scope, b, 3);
    for (std::size_t i = 0; i < 3; ++i) CHECK_FALSE(keys[i] == other[i]);
    CHECK(c.keys(k_scope, a, 3) == keys);
    CHECK(c.keys(k_scope, a, 10).size() == 3);  // whole blocks only
    CHECK_FALSE(c.keys(cache_scope("package-a", "tenant"), a, 1)[0] == keys[0]);
    CHECK_FALSE(cache_scope("package-b", "") == k_scope);
    CHECK_FALSE(cache_scope("ab", "c") == cache_scope("a", "bc"));
}

TEST_CASE("prefix cache: lookup finds the longest cached prefix in whole blocks under the limit",
          "[actors][prefix_cache]") {
    prefix_cache c(4);
    CHECK_FALSE(c.lookup(k_scope, run(0, 12), 11));
    CHECK(c.insert(7, k_scope, run(0, 10)).empty());  // kept as 8 tokens: two whole blocks
    CHECK(c.tokens_of(7) == 8);
    auto prompt = run(0, 12);
    auto hit = c.lookup(k_scope, prompt, 11);
    REQUIRE(hit);
    CHECK(hit->source == 7);
    CHECK(hit->tokens == 8);
    // The limit (the prompt's last token is always prefilled) cuts to whole blocks.
    hit = c.lookup(k_scope, run(0, 8), 7);
    REQUIRE(hit);
    CHECK(hit->tokens == 4);
    CHECK_FALSE(c.lookup(k_scope, run(0, 4), 3));
    // A prompt that differs in its second block reuses the first.
    prompt[5] = -1;
    hit = c.lookup(k_scope, prompt, 11);
    REQUIRE(hit);
    CHECK(hit->tokens == 4);
    prompt[0] = -1;
    CHECK_FALSE(c.lookup(k_scope, prompt, 11));
    // Another tenant's salt never shares.
    CHECK_FALSE(c.lookup(cache_scope("package-a", "tenant-2"), run(0, 12), 11));
    CHECK(c.consistent());
}

TEST_CASE("prefix cache: least recently used goes first; lookups and inserts count as use", "[actors][prefix_cache]") {
    prefix_cache c(2);
    c.insert(1, k_scope, run(0, 4));
    c.insert(2, k_scope, run(100, 4));
    c.insert(3, k_scope, run(200, 4));
    REQUIRE(c.lookup(k_scope, run(0, 5), 4));  // 1 used again
    CHECK(c.evict_lru() == std::optional<sequence_id>(2));
    CHECK(c.evict_lru(3) == std::optional<sequence_id>(1));  // 3 is kept: the next one goes
    CHECK_FALSE(c.evict_lru(3));
    CHECK(c.entries() == 1);
    CHECK(c.clear() == std::vector<sequence_id>{3});
    CHECK(c.entries() == 0);
    CHECK(c.consistent());
}

TEST_CASE("prefix cache: an entry that is a prefix of a new one is redundant, and so is a duplicate",
          "[actors][prefix_cache]") {
    prefix_cache c(4);
    CHECK(c.insert(1, k_scope, run(0, 8)).empty());
    CHECK(c.insert(2, k_scope, run(50, 8)).empty());
    // 3 extends 1: 1 is returned to be freed.
    CHECK(c.insert(3, k_scope, run(0, 16)) == std::vector<sequence_id>{1});
    CHECK_FALSE(c.contains(1));
    // 4 holds nothing 3 does not: 4 itself is redundant.
    CHECK(c.insert(4, k_scope, run(0, 12)) == std::vector<sequence_id>{4});
    CHECK_FALSE(c.contains(4));
    // Under another scope the same tokens are a separate entry.
    CHECK(c.insert(5, cache_scope("package-a", "x"), run(0, 8)).empty());
    // Fewer tokens than a block: nothing to keep.
    CHECK(c.insert(6, k_scope, run(0, 3)) == std::vector<sequence_id>{6});
    CHECK(c.entries() == 3);
    CHECK(c.consistent());
}

TEST_CASE("prefix cache: a running sequence's entry is hit but never evicted, freed or returned by clear",
          "[actors][prefix_cache]") {
    prefix_cache c(4);
    CHECK(c.insert(1, k_scope, run(0, 8)).empty());  // kept (a finished sequence)
    // 2 runs and extends 1: 1 is freed; 2 only joins the index.
    CHECK(c.insert(2, k_scope, run(0, 12), /*running=*/true) == std::vector<sequence_id>{1});
    CHECK(c.running(2));
    CHECK(c.running_entries() == 1);
    CHECK(c.kept_entries() == 0);
    auto hit = c.lookup(k_scope, run(0, 13), 12);
    REQUIRE(hit);
    CHECK(hit->source == 2);
    CHECK(hit->tokens == 12);
    CHECK_FALSE(c.evict_lru());  // nothing of its own to give back
    // A finished sequence extending the running one: the running entry leaves the index
    // but is not returned (its KV is its sequence's).
    CHECK(c.insert(3, k_scope, run(0, 16)).empty());
    CHECK_FALSE(c.contains(2));
    CHECK(c.running_entries() == 0);
    CHECK(c.insert(4, k_scope, run(100, 4), true).empty());
    CHECK(c.clear() == std::vector<sequence_id>{3});  // 4 is dropped, not handed back
    CHECK(c.entries() == 0);
    CHECK(c.running_entries() == 0);
    CHECK(c.consistent());
}

TEST_CASE("prefix cache: a released running entry is promoted in place; lookup keys serve the insert",
          "[actors][prefix_cache]") {
    prefix_cache c(4);
    auto prompt = run(0, 13);
    auto shared = std::make_shared<const std::vector<prefix_cache::token>>(prompt);
    prefix_cache::lookup_trace trace;
    CHECK_FALSE(c.lookup(k_scope, shared, 12, trace));  // empty cache: nothing hashed
    CHECK(trace.keys.empty());
    CHECK(c.insert(9, k_scope, run(500, 8)).empty());
    CHECK_FALSE(c.lookup(k_scope, shared, 12, trace));
    CHECK(trace.keys.size() == 1);  // a miss at the first block stops there
    CHECK(trace.keys == c.keys(k_scope, prompt, 1));
    CHECK(trace.equal == 0);
    // The share reuses the key it has and hashes the rest.
    CHECK(c.insert(1, k_scope, shared, shared->size(), true, &trace).empty());
    CHECK(c.running(1));
    CHECK(c.tokens_of(1) == 12);
    // Its release with 8 generated tokens: the same entry, kept, 20 tokens (5 blocks).
    auto all = prompt;
    for (int i = 0; i < 8; ++i) all.push_back(900 + i);
    CHECK(c.insert(1, k_scope, all).empty());
    CHECK_FALSE(c.running(1));
    CHECK(c.tokens_of(1) == 20);
    CHECK(c.kept_entries() == 2);
    auto hit = c.lookup(k_scope, all, 20);
    REQUIRE(hit);
    CHECK(hit->tokens == 20);
    CHECK(c.consistent());
    // A prompt another entry already holds is not indexed again.
    CHECK(c.insert(2, k_scope, run(0, 8), true) == std::vector<sequence_id>{2});
    // A running entry that a longer one covers leaves the index; its release then finds
    // the longer entry holding everything and is not kept.
    CHECK(c.insert(3, k_scope, run(300, 8), true).empty());
    CHECK(c.insert(4, k_scope, run(300, 16)).empty());
    CHECK_FALSE(c.contains(3));
    CHECK(c.insert(3, k_scope, run(300, 12)) == std::vector<sequence_id>{3});
    CHECK(c.running_entries() == 0);
    CHECK(c.consistent());
}

TEST_CASE("prefix cache: the index stays consistent through a random workload", "[actors][prefix_cache]") {
    std::mt19937 rng(11);
    prefix_cache c(8);
    sequence_id next = 1;
    std::set<sequence_id> running_ids;  // running entries: never handed back to be freed
    std::map<sequence_id, std::vector<prefix_cache::token>> running_tokens;
    // Prompts built from a few shared stems so prefixes overlap often.
    std::vector<std::vector<prefix_cache::token>> stems{run(0, 40), run(1000, 24), run(2000, 64)};
    for (int step = 0; step < 2000; ++step) {
        const int action = std::uniform_int_distribution<int>(0, 9)(rng);
        auto tokens = stems[std::size_t(rng() % stems.size())];
        tokens.resize(std::uniform_int_distribution<std::size_t>(1, tokens.size())(rng));
        for (int i = 0, extra = int(rng() % 20); i < extra; ++i) tokens.push_back(std::int32_t(rng() % 50));
        if (action < 5) {
            const bool running = action == 0;
            for (auto r : c.insert(next, k_scope, tokens, running)) REQUIRE_FALSE(running_ids.contains(r));
            if (running && c.contains(next)) {
                running_ids.insert(next);
                running_tokens[next] = tokens;
            }
            ++next;
            std::erase_if(running_ids, [&](sequence_id id) { return !c.contains(id); });
            REQUIRE(c.running_entries() == running_ids.size());
        } else if (action < 8) {
            auto hit = c.lookup(k_scope, tokens, std::int64_t(tokens.size()) - 1);
            if (hit) {
                REQUIRE(hit->tokens % 8 == 0);
                REQUIRE(hit->tokens <= std::int64_t(tokens.size()) - 1);
                REQUIRE(c.contains(hit->source));
            }
        } else if (action == 9 && !running_ids.empty()) {
            // A running sequence ends: its entry is promoted with more tokens (or dropped when
            // another entry holds them all); with tokens that do not extend it, it is refused.
            const auto id = *running_ids.begin();
            running_ids.erase(running_ids.begin());
            auto grown = running_tokens.at(id);
            const bool extends = rng() % 2 == 0;
            if (!extends) grown.assign(grown.size(), 77);
            for (int i = 0, extra = int(rng() % 20); i < extra; ++i) grown.push_back(std::int32_t(rng() % 50));
            const auto r = c.insert(id, k_scope, grown);
            if (extends) {
                REQUIRE((c.contains(id) ? !c.running(id) : r == std::vector<sequence_id>{id}));
            } else {
                REQUIRE(r == std::vector<sequence_id>{id});
                REQUIRE(c.running(id));
                c.erase(id);  // it ends with its sequence
            }
        } else if (auto gone = c.evict_lru()) {
            REQUIRE_FALSE(c.contains(*gone));
        }
        REQUIRE(c.consistent());
    }
}

TEST_CASE("prefix cache: a lookup's trace serves only the insert of its own run", "[actors][prefix_cache]") {
    prefix_cache c(4);
    auto history = std::make_shared<const std::vector<prefix_cache::token>>(run(0, 16));
    CHECK(c.insert(1, k_scope, history, history->size()).empty());
    // The next turn: the history and 6 new tokens. The lookup compares the history's entry
    // with the prompt; the share finds that entry redundant without comparing it again.
    auto turn = std::make_shared<std::vector<prefix_cache::token>>(*history);
    for (int i = 0; i < 6; ++i) turn->push_back(700 + i);
    const std::shared_ptr<const std::vector<prefix_cache::token>> prompt = turn;
    prefix_cache::lookup_trace trace;
    auto hit = c.lookup(k_scope, prompt, std::int64_t(prompt->size()) - 1, trace);
    REQUIRE(hit);
    CHECK(hit->source == 1);
    CHECK(hit->tokens == 16);
    CHECK(trace.equal == 1);
    CHECK(trace.equal_tokens == 16);
    CHECK(trace.keys == c.keys(k_scope, *prompt, 4));  // the hit's keys: nothing hashed but block 0 and 4
    const auto compared = c.compared_tokens();
    CHECK(compared >= 16);
    CHECK(c.insert(2, k_scope, prompt, prompt->size(), true, &trace) == std::vector<sequence_id>{1});
    CHECK(c.compared_tokens() == compared);  // entry 1 was compared by the lookup, not again
    CHECK_FALSE(c.contains(1));
    CHECK(c.tokens_of(2) == 20);
    CHECK(c.consistent());

    // A trace handed to the insert of another run (other tokens, other keys) is ignored:
    // that run is hashed and compared from scratch, so its keys are its own.
    prefix_cache d(4);
    CHECK(d.insert(1, k_scope, run(0, 16)).empty());
    prefix_cache::lookup_trace other;
    auto looked = std::make_shared<const std::vector<prefix_cache::token>>(run(0, 20));
    REQUIRE(d.lookup(k_scope, looked, 19, other));
    auto different = std::make_shared<const std::vector<prefix_cache::token>>(run(100, 20));
    CHECK(d.insert(2, k_scope, different, different->size(), true, &other).empty());
    CHECK(d.contains(1));  // not a prefix of the other run: still cached
    CHECK(d.keys(k_scope, run(100, 20), 5) != other.keys);
    CHECK(d.tokens_of(2) == 20);
    CHECK(d.consistent());
    // And one whose entry has since been replaced (the same sequence id again) is not
    // trusted for the new incarnation: it is compared.
    prefix_cache e(4);
    CHECK(e.insert(1, k_scope, run(0, 8)).empty());
    prefix_cache::lookup_trace stale;
    auto again = std::make_shared<const std::vector<prefix_cache::token>>(run(0, 12));
    REQUIRE(e.lookup(k_scope, again, 11, stale));
    CHECK(stale.equal == 1);
    CHECK(e.erase(1));
    CHECK(e.insert(1, k_scope, run(0, 8)).empty());  // a new incarnation of sequence 1
    const auto before = e.compared_tokens();
    CHECK(e.insert(2, k_scope, again, again->size(), false, &stale) == std::vector<sequence_id>{1});
    CHECK(e.compared_tokens() == before + 8);
    CHECK_FALSE(e.contains(1));
    CHECK(e.consistent());
}

TEST_CASE("prefix cache: a lookup's walk finds what probing finds; colliding keys can only make it miss",
          "[actors][prefix_cache]") {
    // Runs share blocks often: a few stems, then a tail from a small alphabet.
    auto make_run = [](std::mt19937& rng) {
        static const std::vector<std::vector<prefix_cache::token>> stems{run(0, 40), run(1000, 24), run(2000, 64)};
        const auto& stem = stems[std::uniform_int_distribution<std::size_t>(0, 2)(rng)];
        std::vector<prefix_cache::token> t(stem.begin(),
                                           stem.begin() + std::uniform_int_distribution<std::ptrdiff_t>(0, std::ptrdiff_t(stem.size()))(rng));
        const auto tail = std::uniform_int_distribution<int>(0, 30)(rng);
        for (int i = 0; i < tail; ++i) t.push_back(std::uniform_int_distribution<prefix_cache::token>(0, 2)(rng));
        if (t.empty()) t.push_back(1);
        return t;
    };
    const cache_key other_scope = cache_scope("package-a", "tenant");
    // Full keys (the walk checked against probing), then keys of 3 bits (a collision at
    // nearly every block, a key repeated along most runs), walking and probing.
    for (const auto& [mask, probing] : {std::pair{~std::uint64_t(0), false}, std::pair{std::uint64_t(7), false},
                                        std::pair{std::uint64_t(7), true}}) {
        const bool colliding = mask != ~std::uint64_t(0);
        CAPTURE(colliding, probing);
        std::mt19937 rng(colliding ? 6 : 5);
        prefix_cache c(4, mask);
        c.probe_only(probing);
        prefix_cache reference(4, mask);  // the same operations, looked up by probing only
        reference.probe_only(true);
        std::map<sequence_id, std::pair<cache_key, std::vector<prefix_cache::token>>> held;  // what each entry holds
        sequence_id next = 1;
        int hits = 0;
        for (int step = 0; step < 3000; ++step) {
            const int action = std::uniform_int_distribution<int>(0, 9)(rng);
            if (action < 4) {
                const auto scope = std::uniform_int_distribution<int>(0, 5)(rng) == 0 ? other_scope : k_scope;
                auto t = make_run(rng);
                const auto seq = next++;
                auto freed = c.insert(seq, scope, t);
                if (!colliding) CHECK(reference.insert(seq, scope, t) == freed);
                t.resize(t.size() / 4 * 4);
                held[seq] = {scope, t};
                for (auto r : freed) held.erase(r);
            } else if (action == 4 && !held.empty()) {
                auto it = held.begin();
                std::advance(it, std::uniform_int_distribution<std::size_t>(0, held.size() - 1)(rng));
                CHECK(c.erase(it->first));
                if (!colliding) CHECK(reference.erase(it->first));
                held.erase(it);
            } else if (action == 5) {
                auto victim = c.evict_lru();
                if (!colliding) CHECK(reference.evict_lru() == victim);
                if (victim) held.erase(*victim);
            } else {
                const auto scope = std::uniform_int_distribution<int>(0, 5)(rng) == 0 ? other_scope : k_scope;
                auto prompt = std::make_shared<const std::vector<prefix_cache::token>>(make_run(rng));
                const auto limit = std::int64_t(prompt->size()) - 1;
                prefix_cache::lookup_trace trace;
                auto h = c.lookup(scope, prompt, limit, trace);
                // The keys it hands on are the prompt's own, whatever it met on the way.
                CHECK(trace.keys == c.keys(scope, *prompt, std::int64_t(trace.keys.size())));
                // The longest prefix any entry of the scope holds, in whole blocks under the limit.
                std::int64_t longest = 0;
                for (const auto& [seq, e] : held) {
                    if (!(e.first == scope)) continue;
                    std::int64_t n = 0;
                    while (n + 4 <= std::min<std::int64_t>(limit, std::int64_t(e.second.size())) &&
                           std::equal(e.second.begin() + n, e.second.begin() + n + 4, prompt->begin() + n))
                        n += 4;
                    longest = std::max(longest, n);
                }
                if (h) {
                    ++hits;
                    REQUIRE(held.contains(h->source));
                    const auto& [s, tokens] = held[h->source];
                    CHECK(s == scope);  // never another scope's KV ...
                    REQUIRE(std::int64_t(tokens.size()) >= h->tokens);
                    CHECK(std::equal(tokens.begin(), tokens.begin() + h->tokens, prompt->begin()));  // ... nor other tokens
                    CHECK(h->tokens % 4 == 0);
                    CHECK(h->tokens <= limit);
                }
                if (!colliding) {
                    CHECK((h ? h->tokens : 0) == longest);
                    prefix_cache::lookup_trace probed;
                    auto r = reference.lookup(scope, prompt, limit, probed);
                    REQUIRE(bool(r) == bool(h));
                    if (h) {
                        CHECK(r->source == h->source);  // the same entry as probing picks
                        CHECK(r->tokens == h->tokens);
                    }
                }
            }
            CHECK(c.consistent());
        }
        CHECK(hits > (colliding ? 100 : 300));
    }
}
