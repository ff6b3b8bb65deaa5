// EBNF rules -> the flat grammar the matcher runs, with the checks that keep the
// parse finite: every rule can finish (a recursion has a base case), no left recursion
// (the expansion of a stack top would not end), and the per-rule FOLLOW byte sets the
// compile-time token classification uses.
#include <algorithm>

#include "model/grammar/compiled.hpp"
#include "model/grammar/ebnf.hpp"

namespace calserve::model::grammar::detail {
namespace {

// Expanding a stack top recurses once per leftmost call; this bounds that recursion.
constexpr std::uint32_t k_max_left_depth = 2000;

std::string base_name(const std::string& name) { return name.substr(0, name.find('#')); }

void emit_alt(const ir_seq& seq, std::uint32_t rule, flat_grammar& g) {
    std::string run;
    auto flush = [&] {
        for (std::size_t off = 0; off < run.size(); off += k_max_lit) {
            const std::size_t n = std::min(k_max_lit, run.size() - off);
            g.elems.push_back({elem_kind::lit, static_cast<std::uint16_t>(n), static_cast<std::uint32_t>(g.lits.size())});
            g.lits.append(run, off, n);
            g.rule_of.push_back(rule);
        }
        run.clear();
    };
    for (const auto& it : seq) {
        if (it.kind == ir_item::lit) {
            run += it.bytes;
            continue;
        }
        flush();
        g.elems.push_back({it.kind == ir_item::cls ? elem_kind::cls : elem_kind::ref, 0, it.index});
        g.rule_of.push_back(rule);
    }
    flush();
    g.elems.push_back({elem_kind::end, 0, 0});
    g.rule_of.push_back(rule);
}

byte_set first_of_terminal(const flat_grammar& g, const element& e) {
    byte_set s{};
    if (e.kind == elem_kind::lit) add(s, static_cast<std::uint8_t>(g.lits[e.arg]));
    if (e.kind == elem_kind::cls) {
        for (int b = 0; b < 256; ++b) {
            if (g.dfas[e.arg].next[0][static_cast<std::size_t>(b)] != k_dead) add(s, static_cast<std::uint8_t>(b));
        }
    }
    return s;
}

struct analysis {
    std::vector<std::uint8_t> nullable, productive;
    std::vector<byte_set> first;
};

// Fixpoints of nullable, productive and FIRST over the rules.
analysis analyse(const flat_grammar& g) {
    const std::size_t n = g.alts.size();
    analysis a{std::vector<std::uint8_t>(n, 0), std::vector<std::uint8_t>(n, 0), std::vector<byte_set>(n, byte_set{})};
    for (bool changed = true; changed;) {
        changed = false;
        for (std::size_t r = 0; r < n; ++r) {
            for (const std::uint32_t start : g.alts[r]) {
                bool all_nullable = true;
                bool all_productive = true;
                byte_set f = a.first[r];
                for (std::uint32_t p = start; g.elems[p].kind != elem_kind::end; ++p) {
                    const element& e = g.elems[p];
                    const bool is_ref = e.kind == elem_kind::ref;
                    if (all_nullable) {
                        const byte_set ef = is_ref ? a.first[e.arg] : first_of_terminal(g, e);
                        for (int w = 0; w < 4; ++w) f[static_cast<std::size_t>(w)] |= ef[static_cast<std::size_t>(w)];
                    }
                    const bool empty_class = e.kind == elem_kind::cls && first_of_terminal(g, e) == byte_set{};
                    if (!is_ref || a.nullable[e.arg] == 0) all_nullable = false;
                    if ((is_ref && a.productive[e.arg] == 0) || empty_class) all_productive = false;
                }
                if (f != a.first[r]) a.first[r] = f, changed = true;
                if (all_nullable && a.nullable[r] == 0) a.nullable[r] = 1, changed = true;
                if (all_productive && a.productive[r] == 0) a.productive[r] = 1, changed = true;
            }
        }
    }
    return a;
}

void_result check_left_recursion(const flat_grammar& g, const analysis& a, const ir_grammar& ir) {
    const std::size_t n = g.alts.size();
    std::vector<std::vector<std::uint32_t>> left(n);
    for (std::size_t r = 0; r < n; ++r) {
        for (const std::uint32_t start : g.alts[r]) {
            for (std::uint32_t p = start; g.elems[p].kind == elem_kind::ref; ++p) {
                left[r].push_back(g.elems[p].arg);
                if (a.nullable[g.elems[p].arg] == 0) break;
            }
        }
    }
    std::vector<std::uint8_t> mark(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::uint32_t> depth(n, 0);  // longest chain of leftmost calls (expansion recursion)
    std::vector<std::pair<std::uint32_t, std::size_t>> path;
    for (std::uint32_t s = 0; s < n; ++s) {
        if (mark[s] != 0) continue;
        path.push_back({s, 0});
        mark[s] = 1;
        while (!path.empty()) {
            auto& [r, k] = path.back();
            if (k == left[r].size()) {
                mark[r] = 2;
                for (const std::uint32_t t : left[r]) depth[r] = std::max(depth[r], depth[t] + 1);
                if (depth[r] > k_max_left_depth) {
                    return make_error(status::invalid_argument, position(ir.text, ir.rules[r].at) + ": rule '" +
                                                                    base_name(g.rule_names[r]) +
                                                                    "' nests calls too deeply at its start");
                }
                path.pop_back();
                continue;
            }
            const std::uint32_t t = left[r][k++];
            if (mark[t] == 1) {
                return make_error(status::invalid_argument, position(ir.text, ir.rules[t].at) +
                                                                ": left recursion through rule '" +
                                                                base_name(g.rule_names[t]) + "'");
            }
            if (mark[t] == 0) mark[t] = 1, path.push_back({t, 0});
        }
    }
    return {};
}

void compute_follow(flat_grammar& g, const analysis& a) {
    g.follow.assign(g.alts.size(), byte_set{});
    for (bool changed = true; changed;) {
        changed = false;
        for (std::size_t r = 0; r < g.alts.size(); ++r) {
            for (const std::uint32_t start : g.alts[r]) {
                for (std::uint32_t p = start; g.elems[p].kind != elem_kind::end; ++p) {
                    if (g.elems[p].kind != elem_kind::ref) continue;
                    byte_set f = g.follow[g.elems[p].arg];
                    std::uint32_t q = p + 1;
                    for (; g.elems[q].kind != elem_kind::end; ++q) {
                        const element& e = g.elems[q];
                        const byte_set ef = e.kind == elem_kind::ref ? a.first[e.arg] : first_of_terminal(g, e);
                        for (std::size_t w = 0; w < 4; ++w) f[w] |= ef[w];
                        if (e.kind != elem_kind::ref || a.nullable[e.arg] == 0) break;
                    }
                    if (g.elems[q].kind == elem_kind::end) {
                        for (std::size_t w = 0; w < 4; ++w) f[w] |= g.follow[r][w];
                    }
                    if (f != g.follow[g.elems[p].arg]) g.follow[g.elems[p].arg] = f, changed = true;
                }
            }
        }
    }
}

// Every non-empty alternative of a chain link consumes at least one byte before the
// call to the next link (so a token of n bytes sees at most n links ahead).
bool consumes_per_link(const flat_grammar& g, const analysis& a, std::uint32_t r) {
    for (const std::uint32_t start : g.alts[r]) {
        std::uint32_t end = start;
        while (g.elems[end].kind != elem_kind::end) ++end;
        if (end == start) continue;
        if (g.elems[end - 1].kind == elem_kind::ref) --end;  // the next link (or, conservatively, the operand)
        bool consumes = false;
        for (std::uint32_t p = start; p < end; ++p) {
            const element& e = g.elems[p];
            if (e.kind != elem_kind::ref || a.nullable[e.arg] == 0) consumes = true;
        }
        if (!consumes) return false;
    }
    return true;
}

}  // namespace

result<flat_grammar> parse_ebnf(std::string_view text) {
    auto ir = read_ebnf(text);
    if (!ir) return ir.error();
    if (ir->rules.size() > k_max_rules) return make_error(status::invalid_argument, "1:1: grammar has too many rules");
    flat_grammar g;
    g.dfas = std::move(ir->dfas);
    for (const auto& d : g.dfas) {
        if (d.next.size() > k_max_dfa_states) return make_error(status::invalid_argument, "1:1: character class too large");
    }
    g.alts.resize(ir->rules.size());
    for (std::uint32_t r = 0; r < ir->rules.size(); ++r) {
        g.rule_names.push_back(ir->rules[r].name);
        for (const auto& alt : ir->rules[r].alts) {
            g.alts[r].push_back(static_cast<std::uint32_t>(g.elems.size()));
            emit_alt(alt, r, g);
        }
        if (g.elems.size() > k_max_elems) return make_error(status::invalid_argument, "1:1: grammar too large");
    }
    g.root = ir->index.at("root");
    const analysis a = analyse(g);
    // Name a rule inside the offending recursion rather than `root`, which only uses it.
    std::uint32_t stuck = g.alts.size();
    for (std::uint32_t r = 0; r < g.alts.size(); ++r) {
        if (a.productive[r] == 0 && (stuck == g.alts.size() || stuck == g.root)) stuck = r;
    }
    for (std::uint32_t r = stuck; r < g.alts.size();) {
        return make_error(status::invalid_argument, position(text, ir->rules[r].at) + ": rule '" +
                                                        base_name(g.rule_names[r]) +
                                                        "' can never finish (recursion without a base case)");
    }
    if (auto ok = check_left_recursion(g, a, *ir); !ok) return ok.error();
    compute_follow(g, a);
    g.links.resize(g.alts.size());
    for (std::uint32_t r = 0; r < g.alts.size(); ++r) {
        if (ir->rules[r].link.chain >= 0 && consumes_per_link(g, a, r)) g.links[r] = ir->rules[r].link;
    }
    return g;
}

}  // namespace calserve::model::grammar::detail
