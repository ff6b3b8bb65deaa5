// The EBNF reader: text -> rules of alternatives of items (literal, class, rule call).
// Groups with several alternatives and repetitions become generated rules named
// "<rule>#<n>"; a repetition over a group distributes its alternatives so that every
// repeated element is followed by a call in tail position (docs/sampling.md explains why
// that keeps most tokens context-independent).
#include <charconv>
#include <map>
#include <string>

#include "model/grammar/ebnf.hpp"
#include "model/grammar/utf8.hpp"

namespace calserve::model::grammar::detail {
namespace {

// Bounds on what one text may make the reader build (the parser recurses per group).
constexpr std::size_t k_max_nesting = 200;
constexpr std::size_t k_max_copied_items = 1u << 21;

class reader {
public:
    explicit reader(std::string_view text) : t_(text) {}

    result<ir_grammar> run() {
        skip();
        while (i_ < t_.size()) {
            const std::size_t at = i_;
            std::string name = ident();
            if (name.empty()) return fail(at, "expected a rule name");
            skip();
            if (t_.substr(i_, 3) != "::=") return fail(i_, "expected '::=' after '" + name + "'");
            i_ += 3;
            const std::uint32_t r = rule(name, at);
            if (g_.rules[r].defined) return fail(at, "rule '" + name + "' defined twice");
            g_.rules[r].defined = true;
            g_.rules[r].at = at;
            current_ = name;
            auto alts = alternatives();
            if (!err_.empty()) return make_error(status::invalid_argument, err_);
            g_.rules[r].alts = std::move(alts);
            skip();
        }
        for (const auto& rr : g_.rules) {
            if (!rr.defined) return fail(rr.at, "undefined rule '" + rr.name + "'");
        }
        if (g_.index.find("root") == g_.index.end()) return fail(0, "no rule 'root'");
        g_.text = std::string(t_);
        return std::move(g_);
    }

private:
    error_info fail(std::size_t at, const std::string& what) {
        return make_error(status::invalid_argument, position(t_, at) + ": " + what);
    }
    void error(std::size_t at, const std::string& what) {
        if (err_.empty()) err_ = position(t_, at) + ": " + what;
    }

    void skip() {
        while (i_ < t_.size()) {
            const char c = t_[i_];
            if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
                ++i_;
            } else if (c == '#') {
                while (i_ < t_.size() && t_[i_] != '\n') ++i_;
            } else {
                break;
            }
        }
    }
    static bool ident_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    }
    std::string ident() {
        const std::size_t b = i_;
        while (i_ < t_.size() && ident_char(t_[i_])) ++i_;
        return std::string(t_.substr(b, i_ - b));
    }
    bool at_rule_start() {  // `name ::=` ahead
        std::size_t j = i_;
        while (j < t_.size() && ident_char(t_[j])) ++j;
        if (j == i_) return false;
        while (j < t_.size() && (t_[j] == ' ' || t_[j] == '\t' || t_[j] == '\n' || t_[j] == '\r')) ++j;
        return t_.substr(j, 3) == "::=";
    }

    std::uint32_t rule(const std::string& name, std::size_t at) {
        if (auto it = g_.index.find(name); it != g_.index.end()) return it->second;
        const auto id = static_cast<std::uint32_t>(g_.rules.size());
        g_.rules.push_back({name, {}, false, at, {}});
        g_.index.emplace(name, id);
        return id;
    }
    std::uint32_t fresh(std::vector<ir_seq> alts) {
        const std::string name = current_ + "#" + std::to_string(++generated_);
        const std::uint32_t r = rule(name, i_);
        g_.rules[r].defined = true;
        g_.rules[r].alts = std::move(alts);
        return r;
    }

    std::vector<ir_seq> alternatives() {
        std::vector<ir_seq> alts;
        alts.push_back(sequence());
        skip();
        while (err_.empty() && i_ < t_.size() && t_[i_] == '|') {
            ++i_;
            alts.push_back(sequence());
            skip();
        }
        return alts;
    }

    ir_seq sequence() {
        ir_seq seq;
        for (;;) {
            skip();
            if (!err_.empty() || i_ >= t_.size() || t_[i_] == '|' || t_[i_] == ')' || at_rule_start()) return seq;
            const std::size_t at = i_;
            std::vector<ir_seq> operand = primary();
            if (!err_.empty()) return seq;
            postfix(at, std::move(operand), seq);
        }
    }

    // One item as alternatives of sequences (a plain item is one alternative of one item).
    std::vector<ir_seq> primary() {
        const char c = t_[i_];
        if (c == '"') return {literal()};
        if (c == '[') return {{char_class()}};
        if (c == '.') {
            ++i_;
            return {{class_item(normalize({}, true))}};
        }
        if (c == '(') {
            const std::size_t at = i_++;
            if (++depth_ > k_max_nesting) return error(at, "groups nested too deeply"), std::vector<ir_seq>{};
            auto alts = alternatives();
            --depth_;
            if (i_ >= t_.size() || t_[i_] != ')') error(at, "unclosed '('");
            ++i_;
            return alts;
        }
        if (ident_char(c)) {
            const std::size_t at = i_;
            const std::string name = ident();
            return {{ir_item{ir_item::ref, {}, rule(name, at)}}};
        }
        error(i_, std::string("unexpected '") + c + "'");
        return {};
    }

    void postfix(std::size_t at, std::vector<ir_seq> operand, ir_seq& seq) {
        skip();
        std::size_t lo = 1;
        std::size_t hi = 1;
        bool bounded = true;
        if (i_ < t_.size() && (t_[i_] == '*' || t_[i_] == '+' || t_[i_] == '?')) {
            lo = t_[i_] == '+' ? 1 : 0;
            hi = t_[i_] == '?' ? 1 : 0;
            bounded = t_[i_] == '?';
            ++i_;
        } else if (i_ < t_.size() && t_[i_] == '{') {
            if (!braces(lo, hi, bounded)) return;
        } else {
            splice(std::move(operand), seq);
            return;
        }
        if ((bounded && hi > k_max_repetition) || lo > k_max_repetition) {
            error(at, "repetition bound above " + std::to_string(k_max_repetition));
            return;
        }
        repeat(std::move(operand), lo, bounded ? hi : std::size_t{0}, bounded, seq);
    }

    bool braces(std::size_t& lo, std::size_t& hi, bool& bounded) {
        const std::size_t at = i_++;
        auto number = [&](std::size_t& v) {
            skip();
            const auto* b = t_.data() + i_;
            auto [p, ec] = std::from_chars(b, t_.data() + t_.size(), v);
            if (ec != std::errc{}) return false;
            i_ += static_cast<std::size_t>(p - b);
            skip();
            return true;
        };
        if (!number(lo)) return error(at, "expected a number after '{'"), false;
        hi = lo;
        if (i_ < t_.size() && t_[i_] == ',') {
            ++i_;
            skip();
            bounded = i_ < t_.size() && t_[i_] != '}';
            if (bounded && !number(hi)) return error(at, "expected a number or '}'"), false;
        }
        if (i_ >= t_.size() || t_[i_] != '}') return error(at, "expected '}'"), false;
        ++i_;
        if (bounded && hi < lo) return error(at, "repetition {m,n} with n < m"), false;
        return true;
    }

    void splice(std::vector<ir_seq> operand, ir_seq& seq) {
        if (operand.size() == 1) {
            for (auto& it : operand[0]) seq.push_back(std::move(it));
        } else {
            seq.push_back({ir_item::ref, {}, fresh(std::move(operand))});
        }
    }

    // x{lo,hi} (hi unbounded when !bounded) as a chain of rules R_k ::= alt_i R_{k+1} | ...
    void repeat(std::vector<ir_seq> x, std::size_t lo, std::size_t hi, bool bounded, ir_seq& seq) {
        const std::size_t links = bounded ? hi : lo;
        std::size_t items = 0;
        for (const auto& a : x) items += a.size() + 1;
        copied_ += items * (links + 1);
        if (copied_ > k_max_copied_items || g_.rules.size() + links + 1 > k_max_rules) {
            error(i_, "grammar too large after expanding repetitions");
            return;
        }
        const auto chain = static_cast<std::int64_t>(++chains_);
        std::uint32_t next = 0;
        bool has_next = false;
        if (!bounded) {  // R_loop ::= alt_i R_loop | empty
            const std::uint32_t loop = fresh({});
            g_.rules[loop].link = {chain, 0, chain_link::k_unbounded};
            for (const auto& a : x) {
                ir_seq s = a;
                s.push_back({ir_item::ref, {}, loop});
                g_.rules[loop].alts.push_back(std::move(s));
            }
            g_.rules[loop].alts.push_back({});
            next = loop;
            has_next = true;
        }
        for (std::size_t k = links; k-- > 0;) {
            std::vector<ir_seq> alts;
            for (const auto& a : x) {
                ir_seq s = a;
                if (has_next) s.push_back({ir_item::ref, {}, next});
                alts.push_back(std::move(s));
            }
            if (k >= lo) alts.push_back({});
            next = fresh(std::move(alts));
            has_next = true;
            g_.rules[next].link = {chain, static_cast<std::uint32_t>(k < lo ? lo - k : 0),
                                   bounded ? static_cast<std::uint32_t>(hi - k) : chain_link::k_unbounded};
        }
        if (has_next) seq.push_back({ir_item::ref, {}, next});
    }

    // Escapes shared by literals and classes; returns a code point.
    bool escape(std::uint32_t& cp) {
        const std::size_t at = i_;
        if (++i_ >= t_.size()) return error(at, "dangling '\\'"), false;
        const char c = t_[i_++];
        auto hex = [&](std::size_t n) {
            if (i_ + n > t_.size()) return false;
            auto [p, ec] = std::from_chars(t_.data() + i_, t_.data() + i_ + n, cp, 16);
            if (ec != std::errc{} || p != t_.data() + i_ + n) return false;
            i_ += n;
            return true;
        };
        switch (c) {
            case 'n': cp = '\n'; return true;
            case 'r': cp = '\r'; return true;
            case 't': cp = '\t'; return true;
            case '0': cp = 0; return true;
            case 'x': if (hex(2)) return true; break;
            case 'u': if (hex(4)) return true; break;
            case 'U': if (hex(8) && cp <= k_max_code_point) return true; break;
            default:
                if (c == '\\' || c == '"' || c == '[' || c == ']' || c == '-' || c == '/' || c == '^' || c == '\'') {
                    cp = static_cast<unsigned char>(c);
                    return true;
                }
        }
        return error(at, "bad escape"), false;
    }

    // One UTF-8 character of the grammar text (classes need code points).
    std::uint32_t utf8_char() {
        const auto b = static_cast<unsigned char>(t_[i_]);
        const std::size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        std::uint32_t cp = n == 1 ? b : b & (0x7Fu >> n);
        ++i_;
        for (std::size_t k = 1; k < n && i_ < t_.size(); ++k) cp = cp << 6 | (static_cast<unsigned char>(t_[i_++]) & 0x3F);
        return cp;
    }

    ir_seq literal() {
        const std::size_t at = i_++;
        std::string bytes;
        while (i_ < t_.size() && t_[i_] != '"') {
            if (t_[i_] == '\\') {
                std::uint32_t cp = 0;
                if (!escape(cp)) return {};
                bytes += encode_utf8(cp);
            } else {
                bytes += t_[i_++];
            }
        }
        if (i_ >= t_.size()) return error(at, "unterminated literal"), ir_seq{};
        ++i_;
        if (bytes.empty()) return {};
        return {ir_item{ir_item::lit, std::move(bytes), 0}};
    }

    ir_item class_item(const code_ranges& ranges) {
        std::string key;
        for (const auto& [lo, hi] : ranges) key += std::to_string(lo) + "-" + std::to_string(hi) + ",";
        auto [it, inserted] = dfa_index_.emplace(key, static_cast<std::uint32_t>(g_.dfas.size()));
        if (inserted) g_.dfas.push_back(class_dfa(ranges));
        return {ir_item::cls, {}, it->second};
    }

    ir_item char_class() {
        const std::size_t at = i_++;
        const bool negate = i_ < t_.size() && t_[i_] == '^';
        if (negate) ++i_;
        code_ranges ranges;
        auto one = [&](std::uint32_t& cp) {
            if (t_[i_] == '\\') return escape(cp);
            cp = utf8_char();
            return true;
        };
        while (i_ < t_.size() && t_[i_] != ']') {
            std::uint32_t lo = 0;
            if (!one(lo)) return {};
            std::uint32_t hi = lo;
            if (i_ + 1 < t_.size() && t_[i_] == '-' && t_[i_ + 1] != ']') {
                ++i_;
                if (!one(hi)) return {};
                if (hi < lo) return error(at, "class range out of order"), ir_item{};
            }
            ranges.emplace_back(lo, hi);
        }
        if (i_ >= t_.size()) return error(at, "unterminated '['"), ir_item{};
        ++i_;
        return class_item(normalize(std::move(ranges), negate));
    }

    std::string_view t_;
    std::size_t i_ = 0;
    ir_grammar g_;
    std::string err_;
    std::string current_;
    std::size_t generated_ = 0;
    std::size_t chains_ = 0;
    std::size_t depth_ = 0;
    std::size_t copied_ = 0;  // items written by repetitions
    std::map<std::string, std::uint32_t> dfa_index_;
};

}  // namespace

std::string position(std::string_view text, std::size_t at) {
    std::size_t line = 1;
    std::size_t col = 1;
    for (std::size_t k = 0; k < at && k < text.size(); ++k) {
        if (text[k] == '\n') {
            ++line;
            col = 1;
        } else {
            ++col;
        }
    }
    return std::to_string(line) + ":" + std::to_string(col);
}

result<ir_grammar> read_ebnf(std::string_view text) { return reader(text).run(); }

}  // namespace calserve::model::grammar::detail
