#pragma once
//! build_directory_atomically: a generated directory (a synthetic model, a
//! package) appears all at once or not at all, even when several processes
//! create it at the same moment (parallel test runs, two daemons starting).
//!
//! Builders take an exclusive lock on `<dir>.lock` (flock(2)); the first fills
//! a fresh private sibling (`<dir>.tmp-<pid>-<n>`) and renames it into place,
//! the others wait, then find the directory complete and build nothing. An
//! existing directory that `complete` rejects (an interrupted run, an older
//! format) is replaced under the lock, so no builder ever removes a directory
//! another has just published. A complete directory is used without the lock.
//!
//! Fault model: a failed build leaves nothing behind and returns its error;
//! readers never see a half-written directory under its final name.
#include <filesystem>
#include <functional>

#include "config/result.hpp"

namespace calserve::io {

void_result build_directory_atomically(const std::filesystem::path& dir,
                                       const std::function<bool(const std::filesystem::path&)>& complete,
                                       const std::function<void_result(const std::filesystem::path&)>& build);

}  // namespace calserve::io
