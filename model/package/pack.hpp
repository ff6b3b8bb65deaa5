#pragma once
//! `calserve pack`: writes a synthetic package directory from a preset.
//!
//! Role: emit every file of document 000's layout (67 files for the two-chip
//! presets), parameter blocks as sparse files of the exact sizes (ftruncate; only a
//! deterministic 64 KiB head and tail are written), the calserve manifest with the
//! inventory hashes, and the reference model subdirectory when the synthetic model
//! writer is available. Fault model: any I/O failure is an `io_error` result; the
//! output directory is refused (`invalid_argument`) when it holds foreign files.
//! Decode batch profiles: `decode_batches` (CLI `--decode-batches 1,2,4,8,16`) selects
//! them; the tiny presets default to 1,2,4,8,16 with KV for 16 sequences sized by the
//! capacity planner, the replica to batch 1 only (so it still equals document 000).
//! Invariant: the same preset, profiles and seed give byte-identical metadata files.
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
    std::vector<std::uint32_t> decode_batches;  // decode profiles; empty: the preset's (tiny 1..16, replica 1)
    bool unchecked_profiles = false;  // tests only: write profiles check_decode_batches refuses
    int sampling_head_k = -1;         // decode programs' sampling head: top-k size, 0 = none, -1 = the preset's
    bool s8_v_cache = false;          // KV V stored as S8 (per-position FP32 scales); the golden corpus too
    std::string placement = "tp";     // manifest `placement`: tp | ep | pp (check_placement)
};

result<package> pack(const pack_options& o);

// A profile list pack accepts: strictly ascending, starting with 1, none above k_max_decode_batch.
void_result check_decode_batches(const std::vector<std::uint32_t>& batches);

// True when `dir` holds a package that `pack` of this preset with its default profiles writes
// today (same preset, same decode profiles), so a cached default package from an older
// calserve is rebuilt instead of served.
bool pack_is_current(const std::filesystem::path& dir, const std::string& preset);

// Writes `__Tokenizer/` (9 files) from the tokenizer directory. Returns the relative paths.
result<std::vector<std::string>> write_tokenizer_dir(const preset_spec& s, const package& p,
                                                     const std::filesystem::path& tokenizer_dir,
                                                     const std::filesystem::path& root);

// Writes `data` to `root/rel`, creating parent directories.
void_result write_file(const std::filesystem::path& root, const std::string& rel, std::string_view data);

}  // namespace calserve::model::package
