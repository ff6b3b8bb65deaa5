#pragma once
// Paths tests need: the source tree, the build tree, the calserve binary,
// the tokenizer cache, and a fresh scratch directory per call.
#include <filesystem>
#include <string>

namespace calserve::test {
std::filesystem::path source_dir();
std::filesystem::path binary_dir();
// The calserve executable built alongside the tests.
std::filesystem::path calserve_binary();
// Folder holding the Qwen3 tokenizer.json + tokenizer_config.json (fetched by tools/bootstrap).
std::filesystem::path tokenizer_dir();
// A new empty directory under the build tree, unique per call.
std::filesystem::path scratch_dir(const std::string& tag);
}  // namespace calserve::test
