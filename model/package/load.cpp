// load_package: manifest plus the parameter segments of the reservation file.
#include <algorithm>

#include "config/read_file.hpp"
#include "model/package/manifest.hpp"
#include "model/package/metadata.hpp"
#include "model/package/package.hpp"

namespace calserve::model::package {

namespace {

constexpr std::uint64_t k_max_manifest_bytes = 64ull << 20;

// Segments come from model_memory_reserved_info.txt; a package without that file
// (a manifest-only package) keeps empty segment lists.
void_result attach_segments(package& p) {
    const auto path = p.root / "model_memory_reserved_info.txt";
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return {};
    auto text = read_text_file(path, k_max_manifest_bytes);
    if (!text) return text.error();
    auto res = parse_model_reservation(text.value());
    if (!res) return res.error();
    for (auto& f : p.params) {
        for (const auto& s : res->segments) {
            if (s.chip_mask != f.chip_mask || s.size < 0 || s.file_offset < 0) continue;
            f.segments.push_back({s.kind, static_cast<std::uint64_t>(s.file_offset), static_cast<std::uint64_t>(s.size),
                                  s.addr});
        }
        std::sort(f.segments.begin(), f.segments.end(),
                  [](const param_segment& a, const param_segment& b) { return a.file_offset < b.file_offset; });
    }
    return {};
}

}  // namespace

result<package> load_package(const std::filesystem::path& dir) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec))
        return make_error(status::not_found, "package directory not found: " + dir.string());
    const auto path = dir / k_manifest_file;
    if (!std::filesystem::exists(path, ec)) return make_error(status::package_invalid, "missing " + path.string());
    auto text = read_text_file(path, k_max_manifest_bytes);
    if (!text) return text.error();
    auto root = std::filesystem::absolute(dir, ec);
    auto p = parse_manifest(text.value(), ec ? dir : root);
    if (!p) return p;
    if (auto r = attach_segments(p.value()); !r) return make_error(status::package_invalid, r.error().message);
    return p;
}

}  // namespace calserve::model::package
