#pragma once
//! build_directory_atomically: a generated directory (a synthetic model, a
//! package) appears all at once or not at all, even when several processes
//! create it at the same moment (parallel test runs, two daemons starting).
//!
//! `build` fills a fresh private sibling (`<dir>.tmp-<pid>-<n>`), which is then
//! renamed into place. The first rename wins; a later builder finds the
//! directory complete and discards its copy. An existing directory that
//! `complete` rejects (left by an interrupted run) is replaced.
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
