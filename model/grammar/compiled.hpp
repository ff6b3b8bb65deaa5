#pragma once
//! Internals of the grammar engine (model/grammar/grammar.hpp): the flattened grammar, the parse
//! stacks and the per-position token tables. Only model/grammar_*.cpp and tests include it.
//!
//! Flattened grammar: every rule is a list of alternatives; an alternative is a run of
//! elements in `elems` closed by an `end` element. Terminals are `lit` (a byte string, the
//! sub-state is the offset reached) and `cls` (one UTF-8 character of a class, run as a
//! byte DFA; the sub-state is the DFA state). `ref` calls a rule.
//! Parse stacks are interned nodes (pos, state, parent): "at terminal `pos` in sub-state
//! `state`; when this alternative ends, continue with `parent`". A continuation node's pos
//! is the element after a `ref` (never `end`: a call in tail position continues with the
//! caller's parent, so right recursion does not grow the stack). Node 0 is the empty stack
//! (the grammar accepts; in a compile-time walk, "the rule of the start position ended").
//! Invariant: a parse state is a sorted, duplicate-free list of nodes whose pos is a
//! terminal, or 0.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/result.hpp"
#include "model/grammar/grammar.hpp"

namespace calserve::model::grammar::detail {

enum class elem_kind : std::uint8_t { lit, cls, ref, end };

struct element {
    elem_kind kind = elem_kind::end;
    std::uint16_t len = 0;  // lit: bytes
    std::uint32_t arg = 0;  // lit: offset in lits; cls: dfa index; ref: rule index
};

inline constexpr std::uint16_t k_dead = 0xFFFF;  // DFA: no transition
inline constexpr std::uint16_t k_done = 0xFFFE;  // DFA: one whole character matched
inline constexpr std::size_t k_max_lit = 4095;   // sub-states fit 12 bits
inline constexpr std::size_t k_max_dfa_states = 4095;
inline constexpr std::size_t k_max_elems = 1u << 20;

using byte_set = std::array<std::uint64_t, 4>;
inline bool has(const byte_set& s, std::uint8_t b) { return (s[b >> 6] >> (b & 63) & 1u) != 0; }
inline void add(byte_set& s, std::uint8_t b) { s[b >> 6] |= std::uint64_t{1} << (b & 63); }

struct byte_dfa {
    std::vector<std::array<std::uint16_t, 256>> next;  // state 0 is the start
};

/// A rule of the chain that x{lo,hi} becomes: `lo_left` repetitions still required,
/// at most `hi_left` more allowed (k_unbounded for the loop). Two links of one chain whose
/// counts agree up to the longest token behave alike for every token walk, so they share
/// their per-position tables (see compile). chain < 0: not a link.
struct chain_link {
    static constexpr std::uint32_t k_unbounded = 0xFFFFFFFFu;
    std::int64_t chain = -1;
    std::uint32_t lo_left = 0;
    std::uint32_t hi_left = k_unbounded;
};

struct flat_grammar {
    std::vector<element> elems;
    std::vector<std::vector<std::uint32_t>> alts;  // per rule: first element of each alternative
    std::vector<std::uint32_t> rule_of;            // per element
    std::vector<std::string> rule_names;
    std::string lits;
    std::vector<byte_dfa> dfas;
    std::uint32_t root = 0;
    std::vector<byte_set> follow;  // per rule: bytes that may come right after it ends
    std::vector<chain_link> links;  // per rule; chain < 0 also when a repetition may match empty
};

/// EBNF text -> checked flat grammar (undefined rules, left recursion, rules that can
/// never finish are errors with line:col).
result<flat_grammar> parse_ebnf(std::string_view text);

struct node {
    std::uint32_t pos = 0;
    std::uint16_t state = 0;
    std::uint32_t parent = 0;
};

/// Interned parse-stack nodes; id 0 is the empty stack.
class stack_pool {
public:
    explicit stack_pool(std::size_t reserve = 0) {
        nodes_.reserve(reserve + 1);
        index_.reserve(reserve);
        nodes_.push_back({});
    }
    std::uint32_t intern(std::uint32_t pos, std::uint16_t state, std::uint32_t parent);
    const node& at(std::uint32_t id) const { return nodes_[id]; }
    std::size_t size() const { return nodes_.size(); }

private:
    std::vector<node> nodes_;
    std::unordered_map<std::uint64_t, std::uint32_t> index_;
};

/// Byte steps over parse states of one grammar, interning into one pool.
class stepper {
public:
    stepper(const flat_grammar& g, stack_pool& pool) : g_(g), pool_(pool) {}
    /// The start state: root expanded.
    void initial(std::vector<std::uint32_t>& out);
    /// Nodes after consuming byte b from node n (n != 0), appended to out (unsorted).
    void step(std::uint32_t n, std::uint8_t b, std::vector<std::uint32_t>& out);
    /// out = advance of every non-zero node of in by b, sorted and unique.
    void advance(const std::vector<std::uint32_t>& in, std::uint8_t b, std::vector<std::uint32_t>& out);
    /// Expands the element at pos (not end) whose alternative continues with parent.
    void expand(std::uint32_t pos, std::uint32_t parent, std::vector<std::uint32_t>& out);
    void resume(std::uint32_t continuation, std::vector<std::uint32_t>& out);

private:
    void finish(std::uint32_t pos, std::uint32_t parent, std::vector<std::uint32_t>& out);
    const flat_grammar& g_;
    stack_pool& pool_;
};

/// Parse states (sorted node lists) interned to ids, with their byte transitions cached:
/// a walk that meets a state again (inside a string: after every character) pays one
/// table lookup per byte. Id 0 is the dead state (no stack).
class state_automaton {
public:
    /// Transitions of the first `dense_states` states live in 256-entry rows, the rest
    /// in a hash map; `reserve` presizes the tables (no rehash pauses in a request's
    /// first steps).
    state_automaton(const flat_grammar& g, stack_pool& pool, std::size_t dense_states, std::size_t reserve = 0);
    std::uint32_t intern(const std::vector<std::uint32_t>& nodes);
    std::uint32_t next(std::uint32_t state, std::uint8_t b);
    const std::vector<std::uint32_t>& nodes(std::uint32_t state) const { return states_[state]; }
    /// The state holds the empty stack (grammar accepts; in a compile walk: the rule ended).
    bool ended(std::uint32_t state) const { return ended_[state] != 0; }
    std::size_t size() const { return states_.size(); }

private:
    struct vec_hash {
        std::size_t operator()(const std::vector<std::uint32_t>& v) const;
    };
    static constexpr std::uint32_t k_unknown = 0xFFFFFFFFu;
    stepper st_;
    std::size_t dense_states_;
    std::vector<std::vector<std::uint32_t>> states_;
    std::vector<std::uint8_t> ended_;
    std::unordered_map<std::vector<std::uint32_t>, std::uint32_t, vec_hash> index_;
    std::vector<std::array<std::uint32_t, 256>> rows_;
    std::unordered_map<std::uint64_t, std::uint32_t> sparse_;
    std::vector<std::uint32_t> scratch_;
};

/// Tokens decided by one grammar position alone, and those that need the stack below.
struct slot_table {
    std::vector<std::uint32_t> bits;  // accepted as a bitset (dense) ...
    std::vector<std::int32_t> ids;    // ... or as a list (sparse)
    /// Context-dependent tokens, grouped by the bytes left where the position's rule ends
    /// (a token ending it at several offsets is in several groups): at run time each
    /// distinct suffix is walked once from the real caller, and passes for its whole group.
    struct suffix_group {
        std::string suffix;
        std::vector<std::int32_t> ids;
    };
    std::vector<suffix_group> ctx;
};

}  // namespace calserve::model::grammar::detail

namespace calserve::model::grammar {

struct compiled {
    detail::flat_grammar g;
    std::shared_ptr<const vocabulary> vocab;
    std::vector<std::uint32_t> slot_base;  // per element: first slot of a terminal
    std::vector<detail::slot_table> slots;
    compile_stats st;
};

}  // namespace calserve::model::grammar
