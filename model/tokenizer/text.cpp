#include "model/tokenizer/text.hpp"

#include <cstdlib>
#include <utf8proc.h>

namespace calserve::model::detail {
namespace {

// Expected continuation count and the allowed range of the second byte for a lead
// byte; {0,0,0} for bytes that never start a sequence (Unicode Table 3-7).
struct lead_info {
    int continuation;
    std::uint8_t second_lo;
    std::uint8_t second_hi;
};

lead_info classify_lead(std::uint8_t b) {
    if (b >= 0xC2 && b <= 0xDF) return {1, 0x80, 0xBF};
    if (b == 0xE0) return {2, 0xA0, 0xBF};
    if (b == 0xED) return {2, 0x80, 0x9F};
    if (b >= 0xE1 && b <= 0xEF) return {2, 0x80, 0xBF};
    if (b == 0xF0) return {3, 0x90, 0xBF};
    if (b >= 0xF1 && b <= 0xF3) return {3, 0x80, 0xBF};
    if (b == 0xF4) return {3, 0x80, 0x8F};
    return {0, 0, 0};
}

bool is_continuation(std::uint8_t b) { return (b & 0xC0) == 0x80; }

// Length of the valid prefix of the multi-byte sequence at s[i] (lead included);
// equals continuation+1 when the sequence is complete and valid.
std::size_t valid_prefix(std::string_view s, std::size_t i, const lead_info& lead) {
    std::size_t n = 1;
    for (int k = 0; k < lead.continuation; ++k) {
        if (i + n >= s.size()) break;
        auto b = static_cast<std::uint8_t>(s[i + n]);
        bool ok = k == 0 ? (b >= lead.second_lo && b <= lead.second_hi) : is_continuation(b);
        if (!ok) break;
        ++n;
    }
    return n;
}

}  // namespace

std::size_t find_invalid_utf8(std::string_view s) {
    std::size_t i = 0;
    while (i < s.size()) {
        // ASCII fast path, 8 bytes at a time.
        while (i + 8 <= s.size()) {
            std::uint64_t w;
            __builtin_memcpy(&w, s.data() + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= s.size()) break;
        auto b = static_cast<std::uint8_t>(s[i]);
        if (b < 0x80) {
            ++i;
            continue;
        }
        lead_info lead = classify_lead(b);
        if (lead.continuation == 0) return i;
        if (valid_prefix(s, i, lead) != static_cast<std::size_t>(lead.continuation) + 1) return i;
        i += static_cast<std::size_t>(lead.continuation) + 1;
    }
    return utf8_valid;
}

char32_t next_code_point(std::string_view s, std::size_t& i) {
    auto b0 = static_cast<std::uint8_t>(s[i]);
    if (b0 < 0x80) {
        ++i;
        return b0;
    }
    int n = b0 >= 0xF0 ? 3 : b0 >= 0xE0 ? 2 : 1;
    char32_t cp = b0 & (0x3F >> n);
    for (int k = 1; k <= n; ++k) cp = (cp << 6) | (static_cast<std::uint8_t>(s[i + k]) & 0x3F);
    i += static_cast<std::size_t>(n) + 1;
    return cp;
}

void append_utf8(std::string& out, char32_t cp) {
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

void append_utf8_lossy(std::string& out, std::string_view s) {
    static constexpr std::string_view replacement = "\xEF\xBF\xBD";
    std::size_t i = 0;
    while (i < s.size()) {
        auto b = static_cast<std::uint8_t>(s[i]);
        if (b < 0x80) {
            out.push_back(static_cast<char>(b));
            ++i;
            continue;
        }
        lead_info lead = classify_lead(b);
        if (lead.continuation == 0) {
            out.append(replacement);
            ++i;
            continue;
        }
        std::size_t n = valid_prefix(s, i, lead);
        if (n == static_cast<std::size_t>(lead.continuation) + 1) {
            out.append(s.substr(i, n));
        } else {
            out.append(replacement);  // one U+FFFD for the whole maximal subpart
        }
        i += n;
    }
}

std::size_t incomplete_utf8_tail(std::string_view s) {
    for (std::size_t k = 1; k <= 3 && k <= s.size(); ++k) {
        std::size_t start = s.size() - k;
        auto b = static_cast<std::uint8_t>(s[start]);
        if (is_continuation(b)) continue;
        lead_info lead = classify_lead(b);
        if (lead.continuation == 0 || static_cast<std::size_t>(lead.continuation) < k) return 0;
        return valid_prefix(s, start, lead) == k ? k : 0;
    }
    return 0;
}

bool is_js_whitespace(char32_t cp) {
    switch (cp) {
        case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0xA0: case 0x1680:
        case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000: case 0xFEFF:
            return true;
        default:
            return cp >= 0x2000 && cp <= 0x200A;
    }
}

nfc_normalizer::nfc_normalizer() : inert_bits_(table_limit_ / 64, 0) {
    for (char32_t cp = 0; cp < table_limit_; ++cp) {
        const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
        if (p->combining_class != 0) continue;
        // utf8proc marks code points that can be the second of a canonical pair with
        // the high bit of comb_index; Hangul V/T jamo compose algorithmically.
        if (p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) continue;
        if ((cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2)) continue;
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        if (p->decomp_seqindex != UINT16_MAX) {
            std::string one;
            append_utf8(one, cp);
            utf8proc_uint8_t* mapped = nullptr;
            auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(one.data()),
                                  static_cast<utf8proc_ssize_t>(one.size()), &mapped,
                                  static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
            bool same = n >= 0 && std::string_view(reinterpret_cast<char*>(mapped), static_cast<std::size_t>(n)) == one;
            std::free(mapped);
            if (!same) continue;  // NFC_Quick_Check = No (singletons, exclusions)
        }
        inert_bits_[cp / 64] |= std::uint64_t{1} << (cp % 64);
    }
}

bool nfc_normalizer::is_inert(char32_t cp) const {
    return cp < table_limit_ && ((inert_bits_[cp / 64] >> (cp % 64)) & 1u) != 0;
}

namespace {
void_result nfc_append(std::string_view in, std::string& out) {
    if (in.empty()) return {};
    utf8proc_uint8_t* mapped = nullptr;
    auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(in.data()), static_cast<utf8proc_ssize_t>(in.size()),
                          &mapped, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n < 0) {
        std::free(mapped);
        return make_error(status::invalid_argument, std::string("NFC normalisation failed: ") + utf8proc_errmsg(n));
    }
    out.append(reinterpret_cast<char*>(mapped), static_cast<std::size_t>(n));
    std::free(mapped);
    return {};
}
}  // namespace

result<bool> nfc_normalizer::normalize(std::string_view in, std::string& out) const {
    std::size_t i = 0;
    bool inert = true;
    while (i < in.size()) {
        if (static_cast<std::uint8_t>(in[i]) < 0x80) {
            ++i;
            continue;
        }
        if (!is_inert(next_code_point(in, i))) {
            inert = false;
            break;
        }
    }
    if (inert) return false;
    // utf8proc (2.8) composes a syllable with U+11A7, which is not a trailing
    // consonant, and so deletes it; U+11A7 is a starter that composes with nothing,
    // so NFC of the text equals NFC of the pieces around it, joined by it.
    static constexpr std::string_view u11a7 = "\xE1\x86\xA7";
    out.clear();
    std::size_t start = 0;
    while (true) {
        std::size_t hit = in.find(u11a7, start);
        auto r = nfc_append(in.substr(start, hit == std::string_view::npos ? std::string_view::npos : hit - start), out);
        if (!r) return r.error();
        if (hit == std::string_view::npos) break;
        out += u11a7;
        start = hit + u11a7.size();
    }
    return true;
}

namespace {
struct byte_level_tables {
    std::array<std::string, 256> to_text;
    std::array<std::int16_t, 512> from_cp;  // every alphabet code point is < 512
};

const byte_level_tables& tables() {
    static const byte_level_tables t = [] {
        byte_level_tables r;
        r.from_cp.fill(-1);
        int extra = 0;
        for (int b = 0; b < 256; ++b) {
            bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
            char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
            append_utf8(r.to_text[static_cast<std::size_t>(b)], cp);
            r.from_cp[cp] = static_cast<std::int16_t>(b);
        }
        return r;
    }();
    return t;
}
}  // namespace

const std::array<std::string, 256>& byte_level_alphabet() { return tables().to_text; }

int byte_level_byte_of(char32_t cp) { return cp < 512 ? tables().from_cp[cp] : -1; }

}  // namespace calserve::model::detail
