#pragma once
//! write_file_atomically: a small state file (the model router's alias mapping)
//! is replaced all at once or not at all: the content goes to a private temp file
//! in the same directory, is fsync'd, renamed over the target, and the directory
//! is fsync'd so the rename survives a crash. Readers see the old or the new
//! content, never a mixture. Fault model: any failing step returns io_error with
//! the path and errno text and removes the temp file.
#include <filesystem>
#include <string_view>

#include "config/result.hpp"

namespace calserve::io {

void_result write_file_atomically(const std::filesystem::path& file, std::string_view content);

}  // namespace calserve::io
