#include "tests/fuzz/fuzz_text_support.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace calserve::fuzz {

std::shared_ptr<const model::tokenizer> qwen3_tokenizer() {
    static const std::shared_ptr<const model::tokenizer> tok = [] {
        const char* env = std::getenv("CALSERVE_TOKENIZER_DIR");
        const std::filesystem::path dir =
            env ? std::filesystem::path(env) : std::filesystem::path(CALSERVE_SOURCE_DIR) / ".cache" / "tokenizer-qwen3";
        auto t = model::tokenizer::load(dir);
        if (!t) {
            std::fprintf(stderr, "fuzz: cannot load the tokenizer from %s: %s (run tools/bootstrap)\n",
                         dir.c_str(), t.error().what().c_str());
            std::exit(2);
        }
        return std::move(*t);
    }();
    return tok;
}

std::vector<std::string_view> split(std::string_view in, char sep, std::size_t max_parts) {
    std::vector<std::string_view> out;
    while (out.size() + 1 < max_parts) {
        const auto at = in.find(sep);
        if (at == std::string_view::npos) break;
        out.push_back(in.substr(0, at));
        in.remove_prefix(at + 1);
    }
    out.push_back(in);
    return out;
}

bool valid_utf8(std::string_view s) {
    std::size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        std::uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
        for (std::size_t k = 1; k < n; ++k) {
            const auto cc = static_cast<unsigned char>(s[i + k]);
            if ((cc >> 6) != 0x2) return false;
            cp = (cp << 6) | (cc & 0x3F);
        }
        const std::uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += n;
    }
    return true;
}

}  // namespace calserve::fuzz
