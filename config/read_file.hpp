#pragma once
//! Reading a whole file as text, or as one JSON document: the one reader behind
//! the daemon's config file, a checkpoint's config.json and index, tokenizer
//! files, the package's metadata, the model router's state file and the tools.
//!
//! Fault model: nothing about the file is trusted. Its length is bounded by the
//! caller's `bytes_max` before and while reading (a regular file is sized first,
//! a pipe or /proc file is read in chunks), so a huge or endless file costs no
//! large allocation. Every error names the file: a missing file is `not_found`,
//! one that cannot be opened or read, or is longer than `bytes_max`, `io_error`,
//! malformed JSON `parse_error` ("<file>: not valid JSON: <why>").
#include <cstdint>
#include <filesystem>
#include <string>

#include <boost/json/value.hpp>

#include "config/result.hpp"

namespace calserve {

// A bound fit for configuration and tokenizer files (tokenizer.json of a 256k-token
// vocabulary is ~35 MB).
inline constexpr std::uint64_t k_json_file_bytes_max = 64ull << 20;

result<std::string> read_text_file(const std::filesystem::path& file, std::uint64_t bytes_max);

// Any JSON value; callers check the shape they need.
result<boost::json::value> read_json_file(const std::filesystem::path& file,
                                          std::uint64_t bytes_max = k_json_file_bytes_max);

}  // namespace calserve
