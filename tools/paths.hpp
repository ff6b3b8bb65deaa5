#pragma once
//! Where the CLI finds its data: the tokenizer files and a data home for
//! packages it writes itself (the default package of `calserve serve`).
//!   tokenizer: $CALSERVE_TOKENIZER_DIR, else <source tree>/.cache/tokenizer-qwen3
//!              (fetched by tools/bootstrap), else ./.cache/tokenizer-qwen3.
//!   data home: $CALSERVE_HOME, else $XDG_CACHE_HOME/calserve, else ~/.cache/calserve.
#include <cstdlib>
#include <filesystem>

#include "config/result.hpp"

namespace calserve::tools {

inline result<std::filesystem::path> tokenizer_dir() {
    namespace fs = std::filesystem;
    std::vector<fs::path> candidates;
    if (const char* env = std::getenv("CALSERVE_TOKENIZER_DIR")) candidates.emplace_back(env);
#ifdef CALSERVE_SOURCE_DIR
    candidates.push_back(fs::path(CALSERVE_SOURCE_DIR) / ".cache" / "tokenizer-qwen3");
#endif
    candidates.push_back(fs::current_path() / ".cache" / "tokenizer-qwen3");
    for (const auto& c : candidates)
        if (fs::exists(c / "tokenizer.json")) return c;
    return make_error(status::not_found,
                      "Qwen3 tokenizer files not found; run tools/bootstrap or set CALSERVE_TOKENIZER_DIR");
}

inline std::filesystem::path data_home() {
    if (const char* env = std::getenv("CALSERVE_HOME")) return env;
    if (const char* xdg = std::getenv("XDG_CACHE_HOME")) return std::filesystem::path(xdg) / "calserve";
    if (const char* home = std::getenv("HOME")) return std::filesystem::path(home) / ".cache" / "calserve";
    return std::filesystem::current_path() / ".calserve";
}

}  // namespace calserve::tools
