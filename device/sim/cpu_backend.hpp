#pragma once
//! The `cpu` backend: a plain Hugging Face Qwen3 directory served through the same
//! device interface, with no NPU pacing. It is the simulator with a package
//! synthesised from config.json (one prefill program `cpu_prefill` and a decode
//! program for every batch size 1..runtime.max_batch - 0 means 16 - named
//! `cpu_decode` (batch 1) and `cpu_decode_b<B>`, so no job needs padding; token /
//! position / logits buffers, ping and pong), every latency constant at zero
//! (`step_ms` = `d2h_ms` = 0), memory capacities unbounded, and the model unsplit.
//! The runtime therefore drives a CPU model and the NPU simulator with one code path.
//!
//! Context = min(max_position_embeddings, runtime.slot_context); KV room for
//! runtime.max_running sequences of that context.
#include <filesystem>
#include <memory>

#include "config/config.hpp"
#include "device/sim/sim_device.hpp"
#include "model/weights/hf_config.hpp"

namespace calserve::device::sim {

// Decode batch profiles when runtime.max_batch is 0.
inline constexpr std::int64_t k_cpu_default_max_batch = 16;

// Decode programs of batch 1..max_batch (at least 1).
package_spec cpu_package_spec(const model::hf_config& hf, std::int64_t context, std::int64_t sequences,
                              const std::filesystem::path& model_dir, std::int64_t max_batch = 1);

// Creates, loads, configures and warms up the cpu backend for `model_dir`. `head_k` > 0:
// its decode programs end in a sampling head of that top-k (the runner's verify jobs need one).
result<std::shared_ptr<sim_device>> open_cpu_device(const std::filesystem::path& model_dir, const config& cfg,
                                                    sim_scheduler& scheduler, std::shared_ptr<fault_registry> faults = {},
                                                    std::int64_t head_k = 0);

}  // namespace calserve::device::sim
