#pragma once
// Shared by the grammar tests: the Qwen3 vocabulary, a one-byte-per-token vocabulary, and
// a brute-force reference parser (explicit stacks, no interning, no tail calls, no
// precomputed tables) that the matcher's masks are compared against.
#include <catch2/catch.hpp>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "model/grammar/grammar.hpp"
#include "model/grammar/compiled.hpp"
#include "tests/model/tokenizer_fixture.hpp"

namespace calserve::test {

namespace gr = model::grammar;

inline std::shared_ptr<const gr::vocabulary> qwen3_vocab() {
    static const auto v = [] {
        auto tok = qwen3_tokenizer();
        const auto eos = tok->eos_token_ids();
        return gr::vocabulary::build(*tok, eos);
    }();
    return v;
}

// Token i (i < 256) is the byte i; token 256 is EOS.
inline std::shared_ptr<const gr::vocabulary> byte_vocab() {
    static const auto v = [] {
        std::vector<std::string> t;
        for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
        t.emplace_back("<eos>");
        const std::int32_t eos = 256;
        return gr::vocabulary::from_tokens(std::move(t), std::span(&eos, 1));
    }();
    return v;
}

inline std::shared_ptr<const gr::compiled> compile_ok(std::string_view ebnf, std::shared_ptr<const gr::vocabulary> v) {
    auto c = gr::compile(ebnf, std::move(v));
    if (!c) FAIL("compile failed: " << c.error().what() << "\n" << ebnf);
    return c.value();
}

// Feeds `text` byte by byte; true when every byte is accepted and the grammar accepts at the end.
inline bool matches(std::string_view ebnf, std::string_view text) {
    gr::matcher m(compile_ok(ebnf, byte_vocab()));
    for (const char c : text) {
        if (!m.accept(static_cast<unsigned char>(c))) return false;
    }
    return m.accepting();
}

class reference_parser {
public:
    using frame = std::pair<std::uint32_t, std::uint16_t>;  // element, sub-state
    using stack = std::vector<frame>;

    explicit reference_parser(std::string_view ebnf) {
        auto g = model::grammar::detail::parse_ebnf(ebnf);
        REQUIRE(g.ok());
        g_ = std::move(g.value());
        states_.clear();
        for (const auto start : g_.alts[g_.root]) expand({{start, 0}}, states_);
    }

    bool accepting() const { return states_.count(stack{}) != 0; }
    bool can_take(std::string_view bytes) const { return !run(states_, bytes).empty(); }
    void take(std::string_view bytes) { states_ = run(states_, bytes); }

private:
    std::set<stack> run(std::set<stack> cur, std::string_view bytes) const {
        for (const char c : bytes) {
            std::set<stack> next;
            for (const auto& s : cur) {
                if (!s.empty()) step(s, static_cast<std::uint8_t>(c), next);
            }
            cur = std::move(next);
            if (cur.empty()) break;
        }
        return cur;
    }

    void expand(stack s, std::set<stack>& out) const {
        using model::grammar::detail::elem_kind;
        if (s.empty()) {
            out.insert(s);
            return;
        }
        const auto [p, st] = s.back();
        const auto& e = g_.elems[p];
        if (e.kind == elem_kind::end) {
            s.pop_back();
            if (!s.empty()) s.back().first += 1;
            expand(s, out);
        } else if (e.kind == elem_kind::ref) {
            for (const auto start : g_.alts[e.arg]) {
                stack t = s;
                t.push_back({start, 0});
                expand(t, out);
            }
        } else {
            out.insert(s);
        }
    }

    void step(stack s, std::uint8_t b, std::set<stack>& out) const {
        using namespace model::grammar::detail;
        auto& [p, st] = s.back();
        const auto& e = g_.elems[p];
        if (e.kind == elem_kind::lit) {
            if (static_cast<std::uint8_t>(g_.lits[e.arg + st]) != b) return;
            if (st + 1u < e.len) {
                ++st;
                out.insert(s);
                return;
            }
        } else {
            const auto t = g_.dfas[e.arg].next[st][b];
            if (t == k_dead) return;
            if (t != k_done) {
                st = t;
                out.insert(s);
                return;
            }
        }
        s.back() = {p + 1, 0};
        expand(s, out);
    }

    model::grammar::detail::flat_grammar g_;
    std::set<stack> states_;
};

}  // namespace calserve::test
