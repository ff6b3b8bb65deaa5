#pragma once
// Model-backed helpers shared by the engine and end-to-end tests: synthetic
// model directories and packages built once per test binary (cached in the
// build tree), and greedy continuations computed on the reference transformer.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "model/cpu/kernels.hpp"

namespace calserve::test {

// A tiny synthetic Qwen3 model directory (preset "tiny-dense" or "tiny-moe").
const std::filesystem::path& tiny_model_dir(const std::string& preset = "tiny-dense");
// A synthetic calbin package ("tiny-dense-1chip", "tiny-moe-2chip", ...).
const std::filesystem::path& test_package_dir(const std::string& preset);
// The same preset packed with another seed (other weights, other golden corpus).
const std::filesystem::path& test_package_dir(const std::string& preset, std::uint64_t seed);
// The reference model directory a package points to.
std::filesystem::path package_model_dir(const std::filesystem::path& package_dir);
// `length` seeded random token ids below 150000 (inside the tokenizer's vocabulary).
std::vector<std::int32_t> random_prompt(int seed, int length);
// Greedy continuation on the reference transformer, argmax over BF16-rounded
// logits exactly as the device returns them (ties: lowest id).
// In fp32 arithmetic (the reference tools' mode; engine_harness pins the cpu backend to it).
std::vector<std::int32_t> reference_greedy(const std::filesystem::path& model_dir, const std::vector<std::int32_t>& prompt,
                                           std::int64_t max_tokens);
// The same in a given arithmetic mode.
std::vector<std::int32_t> reference_greedy(const std::filesystem::path& model_dir, const std::vector<std::int32_t>& prompt,
                                           std::int64_t max_tokens, model::arithmetic arith);

}  // namespace calserve::test
