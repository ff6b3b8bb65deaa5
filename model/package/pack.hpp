#pragma once
//! `calserve pack`: writes a synthetic package directory from a preset.
//!
//! Role: emit every file of document 000's layout (67 files for the two-chip
//! presets), parameter blocks as sparse files of the exact sizes (ftruncate; only a
//! deterministic 64 KiB head and tail are written), the calserve manifest with the
//! inventory hashes, and the reference model subdirectory when the synthetic model
//! writer is available. Fault model: any I/O failure is an `io_error` result; the
//! output directory is refused (`invalid_argument`) when it holds foreign files.
//! Invariant: the same preset and seed give byte-identical metadata files.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "model/package/package.hpp"
#include "model/package/preset.hpp"

namespace calserve::model::package {

struct pack_options {
    std::string preset;
    std::filesystem::path out;
    std::uint64_t seed = 1;
    std::filesystem::path tokenizer_dir;  // holds tokenizer.json + tokenizer_config.json
    bool full_hash = false;               // also record full SHA-256 of big sparse blocks
};

result<package> pack(const pack_options& o);

// Writes `__Tokenizer/` (9 files) from the tokenizer directory. Returns the relative paths.
result<std::vector<std::string>> write_tokenizer_dir(const preset_spec& s, const package& p,
                                                     const std::filesystem::path& tokenizer_dir,
                                                     const std::filesystem::path& root);

// Writes `data` to `root/rel`, creating parent directories.
void_result write_file(const std::filesystem::path& root, const std::string& rel, std::string_view data);
// Reads a whole file (bounded by max_bytes).
result<std::string> read_file(const std::filesystem::path& file, std::uint64_t max_bytes = 1ull << 30);

}  // namespace calserve::model::package
