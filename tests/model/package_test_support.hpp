#pragma once
// Helpers for the package tests: pack a preset into a scratch directory, clone a
// package with hard links (cheap, sparse blocks stay sparse) and apply one defect
// to a copy while keeping the manifest inventory consistent.
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "model/package/hashing.hpp"
#include "model/package/pack.hpp"
#include "tests/support/test_paths.hpp"

namespace calserve::test::pkg {

namespace fs = std::filesystem;
namespace mp = calserve::model::package;

inline fs::path pack_preset(const std::string& preset, const std::string& tag) {
    auto dir = scratch_dir(tag) / "pkg";
    mp::pack_options o;
    o.preset = preset;
    o.out = dir;
    o.seed = 7;
    o.tokenizer_dir = tokenizer_dir();
    auto p = mp::pack(o);
    INFO((p.ok() ? std::string() : p.error().what()));
    REQUIRE(p.ok());
    return dir;
}

// Hard-link clone: files are shared until a mutator rewrites them.
inline fs::path clone(const fs::path& src, const std::string& tag) {
    auto dst = scratch_dir(tag) / "pkg";
    for (const auto& e : fs::recursive_directory_iterator(src)) {
        const auto target = dst / fs::relative(e.path(), src);
        if (e.is_directory()) fs::create_directories(target);
        else {
            fs::create_directories(target.parent_path());
            fs::create_hard_link(e.path(), target);
        }
    }
    return dst;
}

inline std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// Replaces the file (breaking the hard link) with new content.
inline void rewrite(const fs::path& p, const std::string& content) {
    fs::remove(p);
    std::ofstream out(p, std::ios::binary);
    out << content;
}

// Updates the manifest's size/hash of one file so only the intended defect remains.
inline void rehash(const fs::path& dir, const std::string& rel) {
    auto doc = boost::json::parse(slurp(dir / "calserve-manifest.json"));
    for (auto& h : doc.at("hashes").as_array()) {
        auto& o = h.as_object();
        if (o.at("file").as_string() != rel) continue;
        o["size"] = fs::file_size(dir / rel);
        o["sha256"] = mp::sha256_file(dir / rel).value();
    }
    rewrite(dir / "calserve-manifest.json", boost::json::serialize(doc));
}

// Replaces the first occurrence of `from` in a file, then re-records its hash.
inline void edit(const fs::path& dir, const std::string& rel, const std::string& from, const std::string& to,
                 bool keep_hash_consistent = true) {
    auto text = slurp(dir / rel);
    const auto at = text.find(from);
    INFO(rel << ": '" << from << "' not found");
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
    rewrite(dir / rel, text);
    if (keep_hash_consistent && rel != "calserve-manifest.json") rehash(dir, rel);
}

inline void remove_scratch(const fs::path& pkg_dir) {
    std::error_code ec;
    fs::remove_all(pkg_dir.parent_path(), ec);
}

}  // namespace calserve::test::pkg
