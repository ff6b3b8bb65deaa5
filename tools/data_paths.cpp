#include "tools/data_paths.hpp"

#include <cstdlib>
#include <spdlog/spdlog.h>

#include "io/atomic_dir.hpp"
#include "model/package/pack.hpp"

namespace calserve::tools {
namespace fs = std::filesystem;

namespace {

constexpr const char* k_tokenizer_folder = "tokenizer-qwen3";

#ifndef CALSERVE_DATA_FROM_BIN
#define CALSERVE_DATA_FROM_BIN "../share/calserve"
#endif

bool env_set(const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}

bool has_tokenizer(const fs::path& dir) {
    std::error_code ec;
    return !dir.empty() && fs::is_regular_file(dir / "tokenizer.json", ec);
}

std::string looked_in(const std::vector<data_place>& places) {
    std::string out;
    for (const auto& p : places) out += "\n  " + p.dir.string() + "  (" + p.origin + ")";
    return out;
}

}  // namespace

fs::path installed_data_dir() {
    std::error_code ec;
    const auto exe = fs::read_symlink("/proc/self/exe", ec);
    if (ec || exe.empty()) return {};
    return (exe.parent_path() / CALSERVE_DATA_FROM_BIN).lexically_normal();
}

fs::path data_home() {
    if (const char* env = std::getenv("CALSERVE_HOME"); env != nullptr && *env != '\0') return env;
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') return fs::path(xdg) / "calserve";
    if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
        return fs::path(home) / ".cache" / "calserve";
    return fs::current_path() / ".calserve";
}

fs::path default_package_dir(const std::string& preset) { return data_home() / "packages" / preset; }

std::vector<data_place> tokenizer_places() {
    std::vector<data_place> places;
    if (const char* env = std::getenv("CALSERVE_TOKENIZER_DIR"); env != nullptr && *env != '\0')
        places.push_back({env, "$CALSERVE_TOKENIZER_DIR"});
    if (const auto inst = installed_data_dir(); !inst.empty())
        places.push_back({inst / k_tokenizer_folder, "installed data, cmake --install"});
    places.push_back({data_home() / k_tokenizer_folder, "data home"});
#ifdef CALSERVE_SOURCE_DIR
    if (!env_set("CALSERVE_NO_SOURCE_TREE"))
        places.push_back({fs::path(CALSERVE_SOURCE_DIR) / ".cache" / k_tokenizer_folder, "source tree, tools/bootstrap"});
#endif
    std::error_code ec;
    places.push_back({fs::current_path(ec) / ".cache" / k_tokenizer_folder, "working directory"});
    return places;
}

result<fs::path> find_tokenizer(const fs::path& given) {
    if (!given.empty()) {
        if (has_tokenizer(given)) return given;
        return make_error(status::not_found, "no tokenizer.json in --tokenizer " + given.string());
    }
    const auto places = tokenizer_places();
    for (const auto& p : places)
        if (has_tokenizer(p.dir)) return p.dir;
    return make_error(status::not_found,
                      "Qwen3 tokenizer files (tokenizer.json) not found; looked in:" + looked_in(places) +
                          "\nrun tools/bootstrap in the source tree, pass --tokenizer DIR or set "
                          "CALSERVE_TOKENIZER_DIR");
}

result<std::filesystem::path> ensure_preset_package(const std::string& preset) {
    auto dir = default_package_dir(preset);
    // A package an older calserve wrote (other decode profiles) is rebuilt, not served.
    auto complete = [&](const std::filesystem::path& d) { return model::package::pack_is_current(d, preset); };
    if (complete(dir)) return dir;
    auto tok = find_tokenizer();
    if (!tok) return tok.error();
    spdlog::info("writing the package {} to {}", preset, dir.string());
    std::error_code ec;
    std::filesystem::create_directories(dir.parent_path(), ec);
    // Two daemons starting at once each build a copy; the first to finish publishes it.
    auto made = io::build_directory_atomically(dir, complete, [&](const std::filesystem::path& d) -> void_result {
        model::package::pack_options o;
        o.preset = preset;
        o.out = d;
        o.tokenizer_dir = *tok;
        if (auto p = model::package::pack(o); !p) return p.error();
        return {};
    });
    if (!made) return made.error();
    return dir;
}

}  // namespace calserve::tools
