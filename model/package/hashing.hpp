#pragma once
//! SHA-256 helpers (OpenSSL EVP) for package inventories.
//!
//! Role: full-file hashes for ordinary files and a sparse-aware digest for the
//! multi-GiB parameter blocks: sha256(head 1 MiB || tail 1 MiB || decimal size),
//! so a routine validation touches 2 MiB instead of 9 GiB; `--full-hash` still
//! reads every byte. Fault model: I/O failures are `io_error` results.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "config/result.hpp"

namespace calserve::model::package {

inline constexpr std::uint64_t k_sparse_window = 1ull << 20;
// Files at least this large are recorded with a sparse digest (and a full hash only on request).
inline constexpr std::uint64_t k_big_file = 64ull << 20;

std::string sha256_hex(std::string_view bytes);
result<std::string> sha256_file(const std::filesystem::path& file);
result<std::string> sparse_digest(const std::filesystem::path& file);

}  // namespace calserve::model::package
