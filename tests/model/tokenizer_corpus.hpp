#pragma once
// Seeded text corpora for the tokenizer conformance test and benchmark: many
// scripts, emoji sequences, combining marks and NFD input, source code, numbers,
// whitespace runs, CRLF, inline special tokens and very long strings.
//
// Deterministic for a seed on every platform (own PRNG helpers, no std
// distributions). Characters on which the JavaScript peer knowingly differs from
// Hugging Face's reference tokenizer are left out (see docs/tokenizer.md): U+FEFF
// and U+0085 (whitespace classes differ), U+017F and U+212A (case folding of the
// contraction rule), and anything assigned after Unicode 14 (PCRE2 10.42's tables).
#include <array>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace calserve::test::corpus {

class rng {
public:
    explicit rng(std::uint64_t seed) : gen_(seed) {}
    std::uint64_t next() { return gen_(); }
    std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(gen_() % n); }
    std::size_t between(std::size_t lo, std::size_t hi) { return lo + below(hi - lo + 1); }
    bool chance(unsigned percent) { return below(100) < percent; }
    template <class C>
    const auto& pick(const C& c) { return c[below(std::size(c))]; }

private:
    std::mt19937_64 gen_;
};

inline void put(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

inline void put_range(std::string& out, rng& r, char32_t lo, char32_t hi, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) put(out, static_cast<char32_t>(lo + r.below(hi - lo + 1)));
}

inline const std::vector<std::string_view>& english_words() {
    static const std::vector<std::string_view> w = {
        "the", "of", "and", "to", "in", "is", "it", "you", "that", "was", "for", "on", "are", "with", "as", "I",
        "his", "they", "be", "at", "one", "have", "this", "from", "or", "had", "by", "word", "but", "what", "some",
        "we", "can", "out", "other", "were", "all", "there", "when", "up", "use", "your", "how", "said", "an",
        "each", "which", "she", "do", "their", "time", "if", "will", "way", "about", "many", "then", "them",
        "would", "write", "like", "so", "these", "her", "long", "make", "thing", "see", "him", "two", "has",
        "look", "more", "day", "could", "go", "come", "did", "number", "sound", "no", "most", "people", "my",
        "over", "know", "water", "than", "call", "first", "who", "may", "down", "side", "been", "now", "find",
        "tokenizer", "Transformer", "NPU", "latency", "throughput", "Qwen3", "kernel", "server", "don't",
        "it's", "we're", "they've", "I'm", "you'll", "she'd", "IT'S", "DON'T", "We'Re", "rock'n'roll",
        "naïve", "café", "résumé", "façade", "Zürich", "São", "Ångström", "coöperate", "jalapeño"};
    return w;
}

inline std::string english(rng& r, std::size_t words) {
    static const std::array<std::string_view, 10> punct = {".", ",", "!", "?", ";", ":", " -", "...", "\"", ")"};
    std::string s;
    for (std::size_t i = 0; i < words; ++i) {
        if (i > 0) s += r.chance(3) ? "  " : " ";
        std::string_view w = r.pick(english_words());
        if (r.chance(8) && !w.empty() && w[0] >= 'a' && w[0] <= 'z') {
            s.push_back(static_cast<char>(w[0] - 32));
            s += w.substr(1);
        } else {
            s += w;
        }
        if (r.chance(12)) s += r.pick(punct);
    }
    return s;
}

// Script samples: [lo, hi] ranges of common letters, joined into words.
struct script_range {
    char32_t lo, hi;
};

inline std::string script_words(rng& r, std::span<const script_range> ranges, std::size_t words, std::string_view sep) {
    std::string s;
    for (std::size_t i = 0; i < words; ++i) {
        if (i > 0) s += sep;
        const script_range& g = ranges[r.below(ranges.size())];
        put_range(s, r, g.lo, g.hi, r.between(1, 8));
        if (r.chance(10)) s += r.pick(std::array<std::string_view, 6>{"。", "，", "、", "!", "?", "."});
    }
    return s;
}

inline std::string world_text(rng& r) {
    static const script_range cjk[] = {{0x4E00, 0x9FA5}};
    static const script_range japanese[] = {{0x3041, 0x3093}, {0x30A1, 0x30F6}, {0x4E00, 0x9FA5}};
    static const script_range korean[] = {{0xAC00, 0xD7A3}};
    static const script_range arabic[] = {{0x0621, 0x064A}};
    static const script_range hindi[] = {{0x0905, 0x0939}, {0x093E, 0x094C}};
    static const script_range thai[] = {{0x0E01, 0x0E30}, {0x0E31, 0x0E3A}, {0x0E40, 0x0E4E}};
    static const script_range cyrillic[] = {{0x0410, 0x044F}};
    static const script_range greek[] = {{0x0391, 0x03A9}, {0x03AC, 0x03CE}};
    static const std::array<std::span<const script_range>, 8> scripts = {cjk, japanese, korean, arabic,
                                                                         hindi, thai, cyrillic, greek};
    std::size_t which = r.below(scripts.size());
    std::string_view sep = which <= 1 ? (r.chance(50) ? "" : " ") : " ";
    return script_words(r, scripts[which], r.between(1, 30), sep);
}

inline std::string emoji(rng& r) {
    static const std::array<std::string_view, 16> fixed = {
        "👨‍👩‍👧‍👦", "👩🏽‍💻", "🧑🏿‍🚀", "👍🏻", "👍🏼", "👍🏽", "👍🏾", "👍🏿", "🏳️‍🌈", "🇯🇵🇫🇷", "1️⃣", "❤️‍🔥", "👁️‍🗨️",
        "🤷🏽‍♀️", "😀😃😄", "✌️"};
    std::string s;
    std::size_t n = r.between(1, 12);
    for (std::size_t i = 0; i < n; ++i) {
        if (r.chance(50)) {
            s += r.pick(fixed);
        } else {
            put(s, static_cast<char32_t>(0x1F600 + r.below(0x4F)));
            if (r.chance(40)) put(s, static_cast<char32_t>(0x1F3FB + r.below(5)));  // skin tone
            if (r.chance(20)) s += "\u200D";                                         // dangling ZWJ
        }
        if (r.chance(40)) s += r.chance(50) ? " " : english(r, 1);
    }
    return s;
}

// Combining marks, NFD input and marks in non-canonical order (NFC must reorder).
inline std::string combining(rng& r) {
    static const std::array<char32_t, 10> marks = {0x0300, 0x0301, 0x0302, 0x0303, 0x0308,
                                                   0x0327, 0x0323, 0x030A, 0x0331, 0x0345};
    static const std::array<std::string_view, 8> nfd_words = {
        "e\u0301te\u0301", "Ame\u0301lie", "n\u0303", "A\u030Angstro\u0308m", "\u1100\u1161\u11A8",
        "\u1112\u1161\u11AB\u1100\u1173\u11AF", "\u03B1\u0301\u03B8\u03B7\u03BD\u03B1", "Vie\u0323\u0302t Nam"};
    std::string s;
    std::size_t n = r.between(1, 10);
    for (std::size_t i = 0; i < n; ++i) {
        if (r.chance(40)) {
            s += r.pick(nfd_words);
        } else {
            put(s, static_cast<char32_t>(r.chance(70) ? 'a' + r.below(26) : 0x3B1 + r.below(24)));
            std::size_t k = r.between(1, 3);
            for (std::size_t j = 0; j < k; ++j) put(s, r.pick(marks));
        }
        s += r.chance(70) ? " " : "";
    }
    return s;
}

inline std::string code(rng& r) {
    static const std::array<std::string_view, 12> snippets = {
        "int main(int argc, char** argv) {\n    return argc > 1 ? 0 : 1;\n}\n",
        "def fib(n):\n\tif n < 2:\n\t\treturn n\n\treturn fib(n-1) + fib(n-2)\n",
        "const xs = [1, 2, 3].map((x) => x ** 2); // squares\r\nconsole.log(`${xs}`);\r\n",
        "fn main() -> Result<(), Box<dyn Error>> {\n    let v: Vec<u8> = vec![0xFF; 16];\n    Ok(())\n}",
        "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"héllo, 世界\")\n}\n",
        "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
        "#!/bin/sh\nset -eu\nfor f in *.txt; do wc -l \"$f\" | awk '{print $1}'; done\n",
        "<div class=\"a b\"><p>Hello &amp; welcome</p><!-- comment --></div>\n",
        "template <class T>\nconstexpr auto sq(T x) noexcept -> T { return x * x; }\n",
        "{\"key\": [1, 2.5e-3, null, true], \"nested\": {\"k\": \"v\\n\"}}",
        "    if (ptr != nullptr && *ptr == '\\0') { ++ptr; }\n",
        "x=$((x+1)); echo \"$x\" >> /tmp/log 2>&1 &&\n  git commit -m 'fix: off-by-one'"};
    std::string s;
    std::size_t n = r.between(1, 3);
    for (std::size_t i = 0; i < n; ++i) {
        std::string_view snip = r.pick(snippets);
        if (r.chance(30)) s += std::string(r.between(1, 12), ' ');
        s += snip;
    }
    return s;
}

inline std::string number(rng& r) {
    std::string s;
    std::size_t n = r.between(1, 4);
    for (std::size_t i = 0; i < n; ++i) {
        std::size_t len = r.between(1, 40);
        if (r.chance(20)) s += "-";
        for (std::size_t j = 0; j < len; ++j) s.push_back(static_cast<char>('0' + r.below(10)));
        if (r.chance(30)) {
            s += r.pick(std::array<std::string_view, 5>{".", ",", "e+", "%", "/"});
            s += std::to_string(r.below(100000));
        }
        if (r.chance(15)) put_range(s, r, 0x0660, 0x0669, r.between(1, 6));  // Arabic-Indic digits
        if (r.chance(10)) put_range(s, r, 0xFF10, 0xFF19, r.between(1, 6));  // full-width digits
        s += r.pick(std::array<std::string_view, 5>{" ", "  ", "\n", ", ", "x"});
    }
    return s;
}

inline std::string whitespace(rng& r) {
    static const std::array<std::string_view, 10> ws = {" ", "  ", "\t", "\n", "\r\n", "\r", "\u00A0", "\u3000",
                                                        "\u2003", "\n\n\n"};
    std::string s;
    std::size_t n = r.between(1, 12);
    for (std::size_t i = 0; i < n; ++i) {
        std::size_t k = r.between(1, 6);
        for (std::size_t j = 0; j < k; ++j) s += r.pick(ws);
        if (r.chance(70)) s += english(r, r.between(1, 3));
    }
    return s;
}

inline std::string specials(rng& r) {
    static const std::array<std::string_view, 14> toks = {
        "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
        "<|im_start|", "<|im_end", "<|vision_pad|>", "<<|im_end|>>", "<|fim_prefix|>", "<tool_response>", "<|"};
    std::string s;
    std::size_t n = r.between(1, 8);
    for (std::size_t i = 0; i < n; ++i) {
        s += r.pick(toks);
        if (r.chance(30)) s += r.pick(std::array<std::string_view, 5>{"\n", " ", "", "user\n", "assistant\n"});
        if (r.chance(60)) s += r.chance(50) ? english(r, r.between(1, 6)) : world_text(r);
    }
    return s;
}

inline std::string misc(rng& r) {
    std::string s;
    std::size_t n = r.between(1, 40);
    for (std::size_t i = 0; i < n; ++i) {
        switch (r.below(8)) {
            case 0: put(s, static_cast<char32_t>(0x20 + r.below(0x5F))); break;
            case 1: put(s, static_cast<char32_t>(0x01 + r.below(0x1F))); break;  // C0 controls
            case 2: put(s, static_cast<char32_t>(0xA0 + r.below(0x60))); break;  // Latin-1
            case 3: put(s, static_cast<char32_t>(0x1D400 + r.below(0x50))); break;  // math alphanumerics
            case 4: put(s, static_cast<char32_t>(0x20000 + r.below(0x100))); break;  // CJK ext. B
            case 5: put(s, static_cast<char32_t>(0xE000 + r.below(0x100))); break;  // private use
            case 6: s += r.pick(std::array<std::string_view, 6>{"'s", "'T", "'re", "'VE", "'m", "'Ll"}); break;
            default: s += r.pick(std::array<std::string_view, 5>{"\uFFFD", "\u200B", "\u2028", "™", "€"}); break;
        }
    }
    return s;
}

inline std::string long_string(rng& r, std::size_t target) {
    std::string s;
    switch (r.below(4)) {
        case 0: s.assign(target, 'a'); break;                     // one huge BPE word
        case 1: s.assign(target / 2, ' '); s += "x"; break;       // a huge whitespace run
        case 2: while (s.size() < target) s += number(r); break;  // digits
        default:
            while (s.size() < target) s += r.chance(50) ? english(r, 30) + "\n" : world_text(r) + "\n";
    }
    return s;
}

inline std::string any_sample(rng& r) {
    switch (r.below(10)) {
        case 0: return english(r, r.between(1, 60));
        case 1: return world_text(r);
        case 2: return emoji(r);
        case 3: return combining(r);
        case 4: return code(r);
        case 5: return number(r);
        case 6: return whitespace(r);
        case 7: return specials(r);
        case 8: return misc(r);
        default: return english(r, 5) + " " + world_text(r) + " " + emoji(r) + " " + code(r);
    }
}

// The conformance corpus: `count` seeded samples plus fixed edge cases and a few
// very long strings (`long_bytes` each).
inline std::vector<std::string> conformance_corpus(std::uint64_t seed, std::size_t count, std::size_t long_bytes) {
    rng r(seed);
    std::vector<std::string> out = {"", " ", "a", "\n", "\r\n", "<|im_end|>", "<|im_start|><|im_end|>", "  \n  ",
                                    "'s", "'S 'T", "123456789012345678901234567890", "👨‍👩‍👧‍👦",
                                    "\uAC00\u11A7", "\u1100\u1161\u11A7\u11A8"};
    for (std::size_t i = 0; i < count; ++i) out.push_back(any_sample(r));
    for (std::size_t i = 0; i < 8; ++i) out.push_back(long_string(r, long_bytes));
    return out;
}

// The benchmark corpus: mixed samples until about `bytes` of UTF-8.
inline std::vector<std::string> bench_corpus(std::uint64_t seed, std::size_t bytes) {
    rng r(seed);
    std::vector<std::string> out;
    std::size_t total = 0;
    while (total < bytes) {
        out.push_back(any_sample(r));
        total += out.back().size();
    }
    return out;
}

}  // namespace calserve::test::corpus
