#pragma once
//! Bulk file reading for weights and parameter blocks.
//!
//! Role: read whole files or byte ranges into caller memory as fast as the disk
//! and page cache allow. The primary path is io_uring with several chunked reads
//! in flight (queue depth x chunk size), so the kernel can overlap copies and
//! readahead; the fallback is a plain pread loop, used when io_uring cannot be
//! set up (old kernel, seccomp, container policy) or when forced by the caller
//! (tests and benchmarks compare both).
//!
//! Fault model: every failure is a `result` error with status `io_error` (or
//! `not_found` for a missing file) and a message naming the path, the offset and
//! the OS error. A read that ends before the requested range (file shorter than
//! expected, or truncated while reading) is a "short read" error, never zero fill.
//!
//! Invariants: on success every byte of the destination was written by the
//! kernel from the file; on failure the destination content is unspecified.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

#include "config/result.hpp"

namespace calserve::io {

enum class read_backend : std::uint8_t { automatic, io_uring, pread };

std::string_view to_string(read_backend b);

struct read_options {
    read_backend backend = read_backend::automatic;
    std::size_t chunk_bytes = 2u << 20;  // one read request; 1-4 MiB is the sweet spot
    unsigned queue_depth = 8;            // io_uring reads in flight
};

// What a read actually did (the backend that ran, after any fallback).
struct read_report {
    read_backend backend = read_backend::pread;
    std::uint64_t bytes = 0;
    std::uint64_t requests = 0;
};

// Size of a regular file in bytes.
result<std::uint64_t> file_size(const std::filesystem::path& path);

// Reads the whole file.
result<std::vector<std::byte>> read_file(const std::filesystem::path& path, const read_options& opts = {},
                                         read_report* report = nullptr);

// Reads exactly `out.size()` bytes starting at `offset` into `out`.
void_result read_range(const std::filesystem::path& path, std::uint64_t offset, std::span<std::byte> out,
                       const read_options& opts = {}, read_report* report = nullptr);

// True when io_uring can be set up in this process (probed once).
bool io_uring_available();

}  // namespace calserve::io
