#pragma once
//! Synthetic Qwen3 checkpoints in the standard Hugging Face layout.
//!
//! Role: no trained weights can be downloaded here, so tests, the simulator and
//! the benchmarks use seeded random weights written exactly like a real
//! checkpoint (config.json, model.safetensors or shards + index, tokenizer
//! files), which the loader then reads like any other directory.
//!
//! Conditioning: uniform weights with variance 1/fan_in (attention, MLP,
//! router), norm weights 1 +- 0.1 and embedding / LM-head rows scaled so the
//! logits have a standard deviation of a few units: no NaN, and greedy decoding
//! does not lock onto one token. Determinism: every tensor is drawn from its own
//! stream keyed by (seed, tensor name), so the same seed gives identical bytes.
//!
//! Fault model: unknown preset or dtype -> invalid_argument; file errors ->
//! io_error; missing tokenizer files -> not_found.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "config/result.hpp"
#include "model/weights/hf_config.hpp"

namespace calserve::model {

// Presets: tiny-dense, tiny-moe, qwen3-0.6b-shape.
std::vector<std::string> synthetic_model_presets();

// Writes config.json + safetensors (+ index when sharded) + the tokenizer files
// copied from `tokenizer_dir` (empty = skip). dtype: "f32", "bf16" (or "f16").
void_result make_synthetic_model(std::string_view preset, const std::filesystem::path& out_dir, std::uint64_t seed,
                                 std::string_view dtype, const std::filesystem::path& tokenizer_dir);

// The lower level, for tests that need other shapes (small vocabularies, ties).
struct synthetic_spec {
    hf_config config;
    std::uint64_t max_shard_bytes = 0;  // 0 = one model.safetensors
};
result<synthetic_spec> synthetic_preset(std::string_view preset);
void_result write_synthetic_model(const synthetic_spec& spec, const std::filesystem::path& out_dir, std::uint64_t seed,
                                  std::string_view dtype);

}  // namespace calserve::model
