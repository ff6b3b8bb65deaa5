// Integer ranges and regex patterns as EBNF (parts of json_schema_to_ebnf).
#include <algorithm>
#include <string>
#include <vector>

#include "model/grammar/grammar.hpp"
#include "model/grammar/schema_internal.hpp"
#include "model/grammar/utf8.hpp"

namespace calserve::model::grammar::detail {
namespace {

std::string digit_class(char a, char b) { return a == b ? std::string("\"") + a + "\"" : std::string("[") + a + "-" + b + "]"; }

std::string join(const std::vector<std::string>& alts) {
    std::string out;
    for (const auto& a : alts) out += (out.empty() ? "" : " | ") + a;
    return alts.size() > 1 ? "(" + out + ")" : out;
}

// Same-length decimal strings a <= b.
std::string digits_range(const std::string& a, const std::string& b) {
    if (a.size() == 1) return digit_class(a[0], b[0]);
    const std::string ra = a.substr(1);
    const std::string rb = b.substr(1);
    if (a[0] == b[0]) return std::string("\"") + a[0] + "\" " + digits_range(ra, rb);
    const std::string zeros(ra.size(), '0');
    const std::string nines(ra.size(), '9');
    std::vector<std::string> alts;
    char first = a[0];
    char last = b[0];
    if (ra != zeros) {
        alts.push_back(std::string("\"") + a[0] + "\" " + digits_range(ra, nines));
        ++first;
    }
    if (rb != nines) {
        alts.push_back(std::string("\"") + b[0] + "\" " + digits_range(zeros, rb));
        --last;
    }
    if (first <= last) alts.push_back(digit_class(first, last) + " [0-9]{" + std::to_string(ra.size()) + "}");
    return join(alts);
}

std::int64_t pow10(std::size_t n) {
    std::int64_t p = 1;
    while (n-- > 0) p *= 10;
    return p;
}

std::string nonneg_range(std::int64_t lo, std::int64_t hi) {
    std::vector<std::string> alts;
    for (std::size_t len = std::to_string(lo).size(); len <= std::to_string(hi).size(); ++len) {
        const std::int64_t a = std::max(lo, len == 1 ? 0 : pow10(len - 1));
        const std::int64_t b = std::min(hi, pow10(len) - 1);
        if (a <= b) alts.push_back(digits_range(std::to_string(a), std::to_string(b)));
    }
    return join(alts);
}

std::string nonneg_from(std::int64_t lo) {
    const std::size_t len = std::to_string(lo).size();
    return join({nonneg_range(lo, pow10(len) - 1), "[1-9] [0-9]{" + std::to_string(len) + ",}"});
}

}  // namespace

std::string integer_range_ebnf(std::optional<std::int64_t> lo, std::optional<std::int64_t> hi) {
    std::vector<std::string> parts;
    if (!lo || *lo < 0) {  // negative values, by absolute value; never "-0"
        const std::int64_t smallest = hi && *hi < 0 ? -*hi : 1;
        parts.push_back("\"-\" " + (lo ? nonneg_range(smallest, -*lo) : nonneg_from(smallest)));
    }
    if (!hi || *hi >= 0) {
        const std::int64_t a = lo ? std::max<std::int64_t>(*lo, 0) : 0;
        parts.push_back(hi ? nonneg_range(a, *hi) : nonneg_from(a));
    }
    return join(parts);
}

namespace {

// A regex (the usual subset: literals, escapes, classes, ., groups, |, ? * + {m,n}, ^ and
// $ at the ends) -> EBNF over the JSON encoding of the matched characters.
class regex_reader {
public:
    explicit regex_reader(std::string_view p) : p_(p) {}

    result<std::string> run() {
        bool anchored_start = false;
        bool anchored_end = false;
        std::string_view body = p_;
        if (!body.empty() && body.front() == '^') anchored_start = true, body.remove_prefix(1);
        if (!body.empty() && body.back() == '$' && (body.size() < 2 || body[body.size() - 2] != '\\')) {
            anchored_end = true;
            body.remove_suffix(1);
        }
        p_ = body;
        std::string e = alternation();
        if (err_.empty() && i_ < p_.size()) fail("unexpected ')'");
        if (!err_.empty()) return make_error(status::invalid_argument, "pattern: " + err_);
        std::string any = "(";
        any += encode(normalize({}, true));
        any += ")*";
        return (anchored_start ? "" : any + " ") + "(" + e + ")" + (anchored_end ? "" : " " + any);
    }

private:
    void fail(const std::string& what) {
        if (err_.empty()) err_ = what + " at offset " + std::to_string(i_);
    }

    std::string alternation() {
        std::vector<std::string> alts{sequence()};
        while (err_.empty() && i_ < p_.size() && p_[i_] == '|') {
            ++i_;
            alts.push_back(sequence());
        }
        std::string out;
        for (const auto& a : alts) out += (out.empty() ? "" : " | ") + (a.empty() ? std::string("\"\"") : a);
        return out;
    }

    std::string sequence() {
        std::string out;
        while (err_.empty() && i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
            std::string a = atom();
            a = "(" + a + ")" + quantifier();
            out += (out.empty() ? "" : " ") + a;
        }
        return out;
    }

    std::string quantifier() {
        if (i_ >= p_.size()) return "";
        std::string q;
        const char c = p_[i_];
        if (c == '?' || c == '*' || c == '+') {
            q = std::string(1, c);
            ++i_;
        } else if (c == '{') {
            const std::size_t close = p_.find('}', i_);
            if (close == std::string_view::npos) return fail("unclosed '{'"), "";
            q = std::string(p_.substr(i_, close - i_ + 1));
            i_ = close + 1;
        }
        if (!q.empty() && i_ < p_.size() && (p_[i_] == '?' || p_[i_] == '+')) {
            fail("lazy or possessive quantifiers are not supported");
        }
        return q;
    }

    std::uint32_t utf8_char() {
        const auto b = static_cast<unsigned char>(p_[i_]);
        const std::size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        std::uint32_t cp = n == 1 ? b : b & (0x7Fu >> n);
        ++i_;
        for (std::size_t k = 1; k < n && i_ < p_.size(); ++k) cp = cp << 6 | (static_cast<unsigned char>(p_[i_++]) & 0x3F);
        return cp;
    }

    // An escape: a class (\d \w \s and negations) or one character.
    code_ranges escape(bool& negated) {
        negated = false;
        if (++i_ >= p_.size()) return fail("dangling '\\'"), code_ranges{};
        const char c = p_[i_++];
        switch (c) {
            case 'd': return {{'0', '9'}};
            case 'D': negated = true; return {{'0', '9'}};
            case 'w': return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
            case 'W': negated = true; return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
            case 's': return {{'\t', '\r'}, {' ', ' '}};
            case 'S': negated = true; return {{'\t', '\r'}, {' ', ' '}};
            case 'n': return {{'\n', '\n'}};
            case 't': return {{'\t', '\t'}};
            case 'r': return {{'\r', '\r'}};
            default: break;
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
            return fail(std::string("unsupported escape '\\") + c + "'"), code_ranges{};
        }
        return {{static_cast<unsigned char>(c), static_cast<unsigned char>(c)}};
    }

    std::string atom() {
        const char c = p_[i_];
        if (c == '(') {
            ++i_;
            if (p_.substr(i_, 2) == "?:") i_ += 2;
            else if (i_ < p_.size() && p_[i_] == '?') return fail("unsupported group"), "";
            std::string e = alternation();
            if (i_ >= p_.size() || p_[i_] != ')') return fail("unclosed '('"), "";
            ++i_;
            return e;
        }
        if (c == '[') return char_class();
        if (c == '.') {
            ++i_;
            return encode(normalize({{'\n', '\n'}}, true));
        }
        if (c == '\\') {
            bool neg = false;
            auto r = escape(neg);
            // \D \W \S: Unicode-aware engines exclude non-ASCII digits, letters and spaces
            // too, so the complement is kept to ASCII (a subset is still exact for validity).
            return encode(neg ? ascii(normalize(r, true)) : normalize(r, false));
        }
        if (c == '^' || c == '$') return fail("anchors are supported only at the ends"), "";
        if (c == '*' || c == '+' || c == '?' || c == '{') return fail("nothing to repeat"), "";
        const std::uint32_t cp = utf8_char();
        return encode({{cp, cp}});
    }

    std::string char_class() {
        ++i_;
        const bool negate = i_ < p_.size() && p_[i_] == '^';
        if (negate) ++i_;
        code_ranges r;
        bool shorthand = false;  // \d \w \s inside: their Unicode meaning is wider than ours
        bool first = true;
        while (i_ < p_.size() && (p_[i_] != ']' || first)) {
            first = false;
            std::uint32_t lo = 0;
            if (p_[i_] == '\\') {
                bool neg = false;
                auto e = escape(neg);
                if (neg || e.size() != 1 || e[0].first != e[0].second) {
                    shorthand = true;
                    if (neg) e = ascii(normalize(e, true));
                    r.insert(r.end(), e.begin(), e.end());
                    continue;
                }
                lo = e[0].first;
            } else {
                lo = utf8_char();
            }
            std::uint32_t hi = lo;
            if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
                ++i_;
                if (p_[i_] == '\\') {
                    bool neg = false;
                    auto e = escape(neg);
                    if (neg || e.size() != 1) return fail("bad class range"), "";
                    hi = e[0].first;
                } else {
                    hi = utf8_char();
                }
                if (hi < lo) return fail("class range out of order"), "";
            }
            r.emplace_back(lo, hi);
        }
        if (i_ >= p_.size()) return fail("unclosed '['"), "";
        ++i_;
        return encode(negate && shorthand ? ascii(normalize(r, true)) : normalize(r, negate));
    }

    static code_ranges ascii(const code_ranges& r) {
        code_ranges out;
        for (const auto& [lo, hi] : r) {
            if (lo <= 0x7F) out.emplace_back(lo, std::min<std::uint32_t>(hi, 0x7F));
        }
        return out;
    }

    // Characters (normalized ranges) -> EBNF for their JSON string encodings.
    static std::string encode(const code_ranges& r) {
        code_ranges plain;
        std::vector<std::string> alts;
        for (auto [lo, hi] : r) {
            for (std::uint32_t c = lo; c <= std::min<std::uint32_t>(hi, 0x5C); ++c) {  // specials live below 0x5D
                if (c >= 0x20 && c != '"' && c != '\\') continue;
                alts.push_back(special(c));
            }
            for (const auto& [a, b] : std::initializer_list<std::pair<std::uint32_t, std::uint32_t>>{
                     {0x20, 0x21}, {0x23, 0x5B}, {0x5D, k_max_code_point}}) {
                const std::uint32_t x = std::max(lo, a);
                const std::uint32_t y = std::min(hi, b);
                if (x <= y) plain.emplace_back(x, y);
            }
        }
        if (!plain.empty()) {
            std::string cls = "[";
            for (const auto& [a, b] : plain) {
                cls += hex(a);
                if (a != b) cls += '-', cls += hex(b);
            }
            alts.insert(alts.begin(), cls + "]");
        }
        if (alts.empty()) return "[^\\x00-\\U0010FFFF]";  // matches nothing
        std::string out;
        for (const auto& a : alts) out += (out.empty() ? "" : " | ") + a;
        return alts.size() > 1 ? "(" + out + ")" : out;
    }
    static std::string hex(std::uint32_t c) {
        char buf[12];
        std::snprintf(buf, sizeof buf, "\\U%08X", c);
        return buf;
    }
    static std::string special(std::uint32_t c) {
        switch (c) {
            case '"': return "\"\\\\\\\"\"";
            case '\\': return "\"\\\\\\\\\"";
            case '\n': return "\"\\\\n\"";
            case '\t': return "\"\\\\t\"";
            case '\r': return "\"\\\\r\"";
            default: break;
        }
        char buf[16];
        std::snprintf(buf, sizeof buf, "\"\\\\u%04x\"", c);
        return buf;
    }

    std::string_view p_;
    std::size_t i_ = 0;
    std::string err_;
};

}  // namespace

result<std::string> pattern_to_ebnf(std::string_view pattern) { return regex_reader(pattern).run(); }

}  // namespace calserve::model::grammar::detail
