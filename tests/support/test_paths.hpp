#pragma once
// Paths tests need: the source tree, the build tree, the calserve binary,
// the tokenizer cache, and a fresh scratch directory per call.
#include <filesystem>
#include <string>
#include <vector>

namespace calserve::test {
std::filesystem::path source_dir();
std::filesystem::path binary_dir();
// The calserve executable built alongside the tests.
std::filesystem::path calserve_binary();
// Folder holding the Qwen3 tokenizer.json + tokenizer_config.json (fetched by tools/bootstrap).
std::filesystem::path tokenizer_dir();
// A new empty directory under the build tree, unique per call. Removed when the test run
// ends with every test passing (a full suite wrote ~25 GB when they were kept); kept for
// reading when a test failed or CALSERVE_KEEP_SCRATCH is set.
std::filesystem::path scratch_dir(const std::string& tag);
// Called once as the run ends: removes this process's scratch directories if `passed`
// and returns the ones kept.
std::vector<std::filesystem::path> end_scratch(bool passed);
}  // namespace calserve::test
