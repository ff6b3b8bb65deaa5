// Compile: for every grammar position (terminal element, sub-state), walk the sorted
// vocabulary from a stack holding only that position and sort each token into
//   accepted  - its bytes fit inside the position's rule, whatever lies below;
//   rejected  - they fail inside the rule, or the rule ends and the next byte cannot
//               follow the rule anywhere in the grammar (FOLLOW set);
//   context-dependent - the rule ends with bytes left that might fit the caller.
// A failed prefix rejects the whole run of tokens sharing it (one binary search).
#include <algorithm>
#include <map>
#include <tuple>

#include "model/grammar/compiled.hpp"

namespace calserve::model::grammar {
namespace {

using detail::elem_kind;

// Compile walks revisit few states very often: all of them get dense transition rows
// (1 KiB each; a long repetition chain may reach tens of thousands).
constexpr std::size_t k_compile_dense_states = 1u << 20;

class slot_builder {
public:
    slot_builder(const compiled& c) : c_(c), v_(*c.vocab), auto_(c.g, pool_, k_compile_dense_states, 1u << 14) {
        std::size_t longest = 0;
        for (const std::int32_t id : v_.sorted()) longest = std::max(longest, v_.bytes(id).size());
        sets_.resize(longest + 1);
        flags_.resize(longest + 1);
        ends_.resize(longest + 1);
    }

    void build(std::uint32_t pos, std::uint16_t state, detail::slot_table& out) {
        const detail::byte_set& follow = c_.g.follow[c_.g.rule_of[pos]];
        accepted_.clear();
        sets_[0] = auto_.intern({pool_.intern(pos, state, 0)});
        flags_[0] = 0;
        for (int b = 0; b < 256; ++b) {
            if (auto_.next(sets_[0], static_cast<std::uint8_t>(b)) == 0) continue;
            walk(v_.first_byte_start()[static_cast<std::size_t>(b)], v_.first_byte_start()[static_cast<std::size_t>(b) + 1],
                 follow);
        }
        if (accepted_.size() > v_.size() / 32) {  // dense: a bitset (no sort needed)
            out.bits.assign(v_.mask_words(), 0);
            for (const std::int32_t id : accepted_) out.bits[static_cast<std::size_t>(id) / 32] |= 1u << (id % 32);
        } else {
            std::sort(accepted_.begin(), accepted_.end());
            out.ids = accepted_;
        }
        for (auto& [suffix, ids] : groups_) out.ctx.push_back({suffix, std::move(ids)});
        groups_.clear();
    }

private:
    // A context-dependent token: one group entry per offset where the rule ended with a
    // byte left that may follow it (offsets below `depth`, the prefix walked).
    void add_context(std::int32_t id, std::size_t depth) {
        const std::string_view tok = v_.bytes(id);
        for (std::size_t e = 0; e < depth; ++e) {
            if (ends_[e] != 0) groups_[std::string(tok.substr(e))].push_back(id);
        }
    }

    // Tokens [begin, end) of the sorted order, all starting with the same byte.
    void walk(std::size_t begin, std::size_t end, const detail::byte_set& follow) {
        const auto sorted = v_.sorted();
        const auto lcp = v_.sorted_lcp();
        std::size_t valid = 0;  // sets_[0..valid] hold the current token's prefixes
        for (std::size_t i = begin; i < end;) {
            const std::string_view tok = v_.bytes(sorted[i]);
            std::size_t d = i == begin ? 0 : std::min<std::size_t>(lcp[i], valid);
            bool failed = false;
            while (d < tok.size()) {
                const auto b = static_cast<std::uint8_t>(tok[d]);
                ends_[d] = auto_.ended(sets_[d]) && detail::has(follow, b) ? 1 : 0;
                flags_[d + 1] = static_cast<std::uint8_t>(flags_[d] | ends_[d]);
                sets_[d + 1] = auto_.next(sets_[d], b);
                ++d;
                if (sets_[d] == 0) {
                    failed = true;
                    break;
                }
            }
            if (!failed) {
                accepted_.push_back(sorted[i]);
                valid = tok.size();
                ++i;
                continue;
            }
            // Every token sharing the dead prefix tok[0, d) has the same fate.
            const std::string_view prefix = tok.substr(0, d);
            const auto first = sorted.begin() + static_cast<std::ptrdiff_t>(i) + 1;
            const auto last = sorted.begin() + static_cast<std::ptrdiff_t>(end);
            const auto stop = std::partition_point(first, last, [&](std::int32_t id) {
                return v_.bytes(id).substr(0, d) == prefix;
            });
            const auto j = static_cast<std::size_t>(stop - sorted.begin());
            if (flags_[d] != 0) {
                for (std::size_t k = i; k < j; ++k) add_context(sorted[k], d);
            }
            valid = d - 1;
            i = j;
        }
    }

    const compiled& c_;
    const vocabulary& v_;
    detail::stack_pool pool_;
    detail::state_automaton auto_;
    std::vector<std::uint32_t> sets_;  // parse state after each prefix length of the token
    std::vector<std::uint8_t> flags_;  // the rule ended, with a following byte, in the prefix
    std::vector<std::uint8_t> ends_;   // ... exactly at this offset
    std::vector<std::int32_t> accepted_;
    std::map<std::string, std::vector<std::int32_t>> groups_;
};

// Links of one repetition chain whose remaining counts agree once clamped to the longest
// token (+1) see the same futures for every token walk: their positions point at the
// first such link's tables. Returns, per element, 1 when its tables are borrowed.
std::vector<std::uint8_t> share_chain_links(compiled& c) {
    std::size_t longest = 0;
    for (const std::int32_t id : c.vocab->sorted()) longest = std::max(longest, c.vocab->bytes(id).size());
    const auto clamp = [&](std::uint32_t n) { return std::min<std::uint64_t>(n, longest + 1); };
    std::vector<std::uint8_t> shared(c.g.elems.size(), 0);
    std::map<std::tuple<std::int64_t, std::uint64_t, std::uint64_t>, std::uint32_t> first;
    for (std::uint32_t r = 0; r < c.g.alts.size(); ++r) {
        const detail::chain_link& l = c.g.links[r];
        if (l.chain < 0) continue;
        auto [it, inserted] = first.try_emplace({l.chain, clamp(l.lo_left), clamp(l.hi_left)}, r);
        if (inserted) continue;
        const auto& mine = c.g.alts[r];
        const auto& theirs = c.g.alts[it->second];
        if (mine.size() != theirs.size()) continue;  // not alike after all: keep own tables
        for (std::size_t a = 0; a < mine.size(); ++a) {
            for (std::uint32_t p = mine[a], q = theirs[a]; c.g.elems[p].kind != elem_kind::end; ++p, ++q) {
                if (c.slot_base[p] == 0xFFFFFFFFu) continue;
                c.slot_base[p] = c.slot_base[q];
                shared[p] = 1;
            }
        }
    }
    return shared;
}

}  // namespace

result<std::shared_ptr<const compiled>> compile(std::string_view ebnf, std::shared_ptr<const vocabulary> vocab) {
    auto g = detail::parse_ebnf(ebnf);
    if (!g) return g.error();
    auto c = std::make_shared<compiled>();
    c->g = std::move(g.value());
    c->vocab = std::move(vocab);
    c->slot_base.assign(c->g.elems.size(), 0xFFFFFFFFu);
    std::size_t slots = 0;
    for (std::size_t p = 0; p < c->g.elems.size(); ++p) {
        const auto& e = c->g.elems[p];
        if (e.kind != elem_kind::lit && e.kind != elem_kind::cls) continue;
        c->slot_base[p] = static_cast<std::uint32_t>(slots);
        slots += e.kind == elem_kind::lit ? e.len : c->g.dfas[e.arg].next.size();
    }
    c->slots.resize(slots);
    const std::vector<std::uint8_t> shared = share_chain_links(*c);
    slot_builder builder(*c);
    for (std::uint32_t p = 0; p < c->g.elems.size(); ++p) {
        if (c->slot_base[p] == 0xFFFFFFFFu || shared[p] != 0) continue;
        const auto& e = c->g.elems[p];
        const std::size_t states = e.kind == elem_kind::lit ? e.len : c->g.dfas[e.arg].next.size();
        for (std::size_t s = 0; s < states; ++s) builder.build(p, static_cast<std::uint16_t>(s), c->slots[c->slot_base[p] + s]);
    }
    c->st.rules = c->g.alts.size();
    c->st.positions = slots;
    for (const auto& s : c->slots) {
        c->st.memory_bytes += s.bits.size() * 4 + s.ids.size() * 4;
        for (const auto& g : s.ctx) {
            c->st.context_dependent += g.ids.size();
            c->st.memory_bytes += g.suffix.size() + g.ids.size() * 4;
        }
    }
    return std::shared_ptr<const compiled>(std::move(c));
}

compile_stats stats(const compiled& c) { return c.st; }

}  // namespace calserve::model::grammar
