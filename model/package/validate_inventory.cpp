// Gate A: inventory against the layout and the manifest, sizes and hashes.
#include <map>

#include "model/package/hashing.hpp"
#include "model/package/validate_internal.hpp"

namespace calserve::model::package {

namespace fs = std::filesystem;

namespace {

void check_hash(validation_context& c, const hash_entry& h, std::uint64_t size) {
    const auto path = c.root / h.file;
    const bool big = size >= k_big_file;
    if (big && !h.sparse_digest.empty()) {
        auto d = sparse_digest(path);
        if (!d) c.add("A_IO_ERROR", severity::error, 'A', h.file, d.error().message);
        else if (d.value() != h.sparse_digest)
            c.add("A_HASH_MISMATCH", severity::error, 'A', h.file, "sparse digest (head/tail/size) differs");
    }
    if (big && !c.opt.full_hash) return;
    if (h.sha256.empty()) {
        c.add(big ? "A_FULL_HASH_UNRECORDED" : "A_HASH_MISSING", big ? severity::info : severity::error, 'A', h.file,
              "manifest records no full SHA-256");
        return;
    }
    auto f = sha256_file(path);
    if (!f) c.add("A_IO_ERROR", severity::error, 'A', h.file, f.error().message);
    else if (f.value() != h.sha256) c.add("A_HASH_MISMATCH", severity::error, 'A', h.file, "SHA-256 differs");
}

void check_entry(validation_context& c, const layout_entry& e, const std::map<std::string, const hash_entry*>& hashes) {
    std::error_code ec;
    const auto path = c.root / e.path;
    if (!fs::is_regular_file(path, ec)) {
        c.add("A_MISSING_FILE", severity::error, 'A', e.path, "required " + std::string(to_string(e.kind)) + " file missing");
        return;
    }
    const auto size = fs::file_size(path, ec);
    if (e.kind == file_kind::param_block && e.chip < c.pkg.chips.size() && size != c.pkg.chips[e.chip].param_bytes) {
        c.add("A_PARAM_BLOCK_SIZE", severity::error, 'A', e.path,
              "size " + std::to_string(size) + " B, manifest says " + std::to_string(c.pkg.chips[e.chip].param_bytes));
        return;
    }
    auto it = hashes.find(e.path);
    if (it == hashes.end()) {
        c.add("A_UNLISTED_FILE", severity::error, 'A', e.path, "file not in the manifest inventory");
        return;
    }
    if (it->second->size != size) {
        c.add("A_SIZE_MISMATCH", severity::error, 'A', e.path,
              "size " + std::to_string(size) + " B, manifest says " + std::to_string(it->second->size));
        return;
    }
    c.readable.insert(e.path);
    check_hash(c, *it->second, size);
}

void check_extra_files(validation_context& c) {
    std::set<std::string> known;
    for (const auto& e : c.layout) known.insert(e.path);
    std::error_code ec;
    const auto ref = c.pkg.reference_model_dir.filename().string();
    for (auto it = fs::recursive_directory_iterator(c.root, ec); it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (ec) break;
        const auto rel = fs::relative(it->path(), c.root, ec).generic_string();
        if (!ref.empty() && (rel == ref || rel.starts_with(ref + "/"))) continue;
        if (!it->is_regular_file(ec) || known.contains(rel) || rel == k_manifest_file || rel == "validation.json") continue;
        c.add("A_EXTRA_FILE", severity::warning, 'A', rel, "file not part of the package layout");
    }
}

}  // namespace

void gate_inventory(validation_context& c) {
    std::map<std::string, const hash_entry*> hashes;
    for (const auto& h : c.pkg.hashes) hashes[h.file] = &h;
    for (const auto& e : c.layout) check_entry(c, e, hashes);
    c.report->figures.file_count = c.readable.size();
    check_extra_files(c);
    std::error_code ec;
    if (c.pkg.reference_model_dir.empty())
        c.add("A_REFERENCE_MODEL_MISSING", severity::warning, 'A', "", "manifest names no reference model directory");
    else if (!fs::is_regular_file(c.pkg.reference_model_dir / "config.json", ec))
        c.add("A_REFERENCE_MODEL_MISSING", severity::error, 'A', c.pkg.reference_model_dir.filename().string(),
              "reference model directory lacks config.json");
}

}  // namespace calserve::model::package
