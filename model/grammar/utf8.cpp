// Character classes as byte DFAs: a set of code points -> the UTF-8 byte sequences that
// encode exactly them (split into same-length ranges whose trailing bytes are full, as
// regex engines do) -> a DFA that merges states with identical remaining suffixes.
#include <algorithm>
#include <map>
#include <utility>

#include "model/grammar/utf8.hpp"

namespace calserve::model::grammar::detail {
namespace {

using seq = std::vector<std::pair<std::uint8_t, std::uint8_t>>;  // byte ranges, one per position

std::size_t utf8_len(std::uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

std::vector<std::uint8_t> encode(std::uint32_t cp) {
    std::string s = encode_utf8(cp);
    return {s.begin(), s.end()};
}

void split(std::uint32_t lo, std::uint32_t hi, std::vector<seq>& out) {
    if (lo > hi) return;
    for (const std::uint32_t b : {0x7Fu, 0x7FFu, 0xFFFFu}) {
        if (lo <= b && b < hi) {
            split(lo, b, out);
            split(b + 1, hi, out);
            return;
        }
    }
    const std::size_t n = utf8_len(lo);
    for (std::size_t i = 1; i < n; ++i) {
        const std::uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                split(lo, lo | m, out);
                split((lo | m) + 1, hi, out);
                return;
            }
            if ((hi & m) != m) {
                split(lo, (hi & ~m) - 1, out);
                split(hi & ~m, hi, out);
                return;
            }
        }
    }
    const auto a = encode(lo);
    const auto z = encode(hi);
    seq s;
    for (std::size_t i = 0; i < a.size(); ++i) s.emplace_back(a[i], z[i]);
    out.push_back(std::move(s));
}

struct builder {
    byte_dfa dfa;
    std::map<std::vector<seq>, std::uint16_t> memo;  // remaining suffixes -> state

    std::uint16_t build(const std::vector<seq>& suffixes) {
        if (auto it = memo.find(suffixes); it != memo.end()) return it->second;
        const auto id = static_cast<std::uint16_t>(dfa.next.size());
        memo.emplace(suffixes, id);
        dfa.next.emplace_back();
        dfa.next[id].fill(k_dead);
        // Bytes with the same set of continuing sequences share a child state.
        std::map<std::vector<seq>, std::vector<std::uint8_t>> by_rest;
        for (int b = 0; b < 256; ++b) {
            std::vector<seq> rest;
            bool done = false;
            for (const seq& s : suffixes) {
                if (b < s[0].first || b > s[0].second) continue;
                if (s.size() == 1) done = true;
                else rest.emplace_back(s.begin() + 1, s.end());
            }
            if (done) dfa.next[id][static_cast<std::size_t>(b)] = k_done;  // UTF-8 is prefix-free
            else if (!rest.empty()) by_rest[rest].push_back(static_cast<std::uint8_t>(b));
        }
        for (auto& [rest, bytes] : by_rest) {
            const std::uint16_t child = build(rest);
            for (const std::uint8_t b : bytes) dfa.next[id][b] = child;
        }
        return id;
    }
};

}  // namespace

std::string encode_utf8(std::uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
        s += static_cast<char>(cp);
    } else if (cp < 0x800) {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        s += static_cast<char>(0xE0 | (cp >> 12));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        s += static_cast<char>(0xF0 | (cp >> 18));
        s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
}

code_ranges normalize(code_ranges r, bool negate) {
    std::sort(r.begin(), r.end());
    code_ranges merged;
    for (const auto& [lo, hi] : r) {
        if (!merged.empty() && lo <= merged.back().second + 1) merged.back().second = std::max(merged.back().second, hi);
        else merged.emplace_back(lo, hi);
    }
    if (negate) {
        code_ranges inv;
        std::uint32_t next = 0;
        for (const auto& [lo, hi] : merged) {
            if (lo > next) inv.emplace_back(next, lo - 1);
            next = hi + 1;
        }
        if (next <= k_max_code_point) inv.emplace_back(next, k_max_code_point);
        merged = std::move(inv);
    }
    code_ranges out;  // surrogates are not characters
    for (const auto& [lo, hi] : merged) {
        if (hi < 0xD800 || lo > 0xDFFF) {
            out.emplace_back(lo, hi);
            continue;
        }
        if (lo < 0xD800) out.emplace_back(lo, 0xD7FF);
        if (hi > 0xDFFF) out.emplace_back(0xE000, hi);
    }
    return out;
}

byte_dfa class_dfa(const code_ranges& ranges) {
    std::vector<seq> seqs;
    for (const auto& [lo, hi] : ranges) split(lo, std::min(hi, k_max_code_point), seqs);
    builder b;
    b.build(seqs);
    return std::move(b.dfa);
}

}  // namespace calserve::model::grammar::detail
