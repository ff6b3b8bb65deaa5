// Parse stacks as interned nodes, and the byte step over them (see grammar_compiled.hpp).
#include <algorithm>

#include "model/grammar/compiled.hpp"

namespace calserve::model::grammar::detail {

std::uint32_t stack_pool::intern(std::uint32_t pos, std::uint16_t state, std::uint32_t parent) {
    const std::uint64_t key = (std::uint64_t{pos} << 44) | (std::uint64_t{state} << 32) | parent;
    auto [it, inserted] = index_.try_emplace(key, static_cast<std::uint32_t>(nodes_.size()));
    if (inserted) nodes_.push_back({pos, state, parent});
    return it->second;
}

void stepper::initial(std::vector<std::uint32_t>& out) {
    out.clear();
    for (const std::uint32_t start : g_.alts[g_.root]) {
        if (g_.elems[start].kind == elem_kind::end) out.push_back(0);
        else expand(start, 0, out);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
}

void stepper::expand(std::uint32_t pos, std::uint32_t parent, std::vector<std::uint32_t>& out) {
    const element& e = g_.elems[pos];
    if (e.kind != elem_kind::ref) {
        out.push_back(pool_.intern(pos, 0, parent));
        return;
    }
    // The caller continues after the call; a call in tail position continues with its parent.
    const std::uint32_t cont = g_.elems[pos + 1].kind == elem_kind::end ? parent : pool_.intern(pos + 1, 0, parent);
    for (const std::uint32_t start : g_.alts[e.arg]) {
        if (g_.elems[start].kind == elem_kind::end) resume(cont, out);
        else expand(start, cont, out);
    }
}

void stepper::resume(std::uint32_t continuation, std::vector<std::uint32_t>& out) {
    if (continuation == 0) {
        out.push_back(0);
        return;
    }
    const node c = pool_.at(continuation);
    if (g_.elems[c.pos].kind == elem_kind::ref) expand(c.pos, c.parent, out);
    else out.push_back(continuation);
}

void stepper::finish(std::uint32_t pos, std::uint32_t parent, std::vector<std::uint32_t>& out) {
    if (g_.elems[pos + 1].kind == elem_kind::end) resume(parent, out);
    else expand(pos + 1, parent, out);
}

void stepper::step(std::uint32_t n, std::uint8_t b, std::vector<std::uint32_t>& out) {
    const node c = pool_.at(n);
    const element& e = g_.elems[c.pos];
    if (e.kind == elem_kind::lit) {
        if (static_cast<std::uint8_t>(g_.lits[e.arg + c.state]) != b) return;
        if (c.state + 1u < e.len) out.push_back(pool_.intern(c.pos, static_cast<std::uint16_t>(c.state + 1), c.parent));
        else finish(c.pos, c.parent, out);
        return;
    }
    const std::uint16_t t = g_.dfas[e.arg].next[c.state][b];
    if (t == k_dead) return;
    if (t == k_done) finish(c.pos, c.parent, out);
    else out.push_back(pool_.intern(c.pos, t, c.parent));
}

void stepper::advance(const std::vector<std::uint32_t>& in, std::uint8_t b, std::vector<std::uint32_t>& out) {
    out.clear();
    for (const std::uint32_t n : in) {
        if (n != 0) step(n, b, out);
    }
    if (out.size() > 1) {
        std::sort(out.begin(), out.end());
        out.erase(std::unique(out.begin(), out.end()), out.end());
    }
}

std::size_t state_automaton::vec_hash::operator()(const std::vector<std::uint32_t>& v) const {
    std::uint64_t h = 0x9E3779B97F4A7C15ull ^ v.size();
    for (const std::uint32_t x : v) h = (h ^ x) * 0x100000001B3ull, h ^= h >> 29;
    return static_cast<std::size_t>(h);
}

state_automaton::state_automaton(const flat_grammar& g, stack_pool& pool, std::size_t dense_states,
                                 std::size_t reserve)
    : st_(g, pool), dense_states_(dense_states) {
    index_.reserve(reserve);
    sparse_.reserve(reserve * 4);
    rows_.reserve(std::min(reserve, dense_states));
    intern({});  // id 0: dead
}

std::uint32_t state_automaton::intern(const std::vector<std::uint32_t>& nodes) {
    auto [it, inserted] = index_.try_emplace(nodes, static_cast<std::uint32_t>(states_.size()));
    if (inserted) {
        states_.push_back(nodes);
        ended_.push_back(!nodes.empty() && nodes[0] == 0 ? 1 : 0);
        if (states_.size() <= dense_states_) rows_.emplace_back().fill(k_unknown);
    }
    return it->second;
}

std::uint32_t state_automaton::next(std::uint32_t state, std::uint8_t b) {
    if (state == 0) return 0;
    const bool dense = state < rows_.size();
    if (dense) {
        if (const std::uint32_t t = rows_[state][b]; t != k_unknown) return t;
    } else if (auto it = sparse_.find(std::uint64_t{state} << 8 | b); it != sparse_.end()) {
        return it->second;
    }
    st_.advance(states_[state], b, scratch_);
    const std::uint32_t t = intern(scratch_);
    if (dense) rows_[state][b] = t;
    else sparse_.emplace(std::uint64_t{state} << 8 | b, t);
    return t;
}

}  // namespace calserve::model::grammar::detail
