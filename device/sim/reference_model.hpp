#pragma once
//! Wiring of the simulator to the reference transformer: the default model factory
//! (the package's reference model directory, tensor-parallel over the package's
//! chips, so a two-chip package computes per-chip shards whose partial sums are
//! combined) and a one-call way to build a configured-from-config simulator.
#include <memory>

#include "config/config.hpp"
#include "device/sim/sim_device.hpp"
#include "model/cpu/kernels.hpp"

namespace calserve::device::sim {

// Loads `spec.reference_model_dir` with tensor_parallel = spec.chip_count, and the S8
// V-cache mode when the package's KV layout stores V in one byte (v_bytes == 1).
// `arith`: the transformer's arithmetic mode (model/cpu/kernels.hpp); the simulator's
// packages use fp32 (what golden corpora and reference tools compute).
model_factory reference_model_factory(int threads, model::arithmetic arith = model::arithmetic::fp32);

// sim_options from `device.sim.*` with the reference-model factory and the given clock/faults.
sim_options sim_options_for(const config& cfg, sim_scheduler& scheduler, std::shared_ptr<fault_registry> faults = {});

// Creates a simulator, loads the package directory, configures and warms it up.
result<std::shared_ptr<sim_device>> open_sim_device(const std::filesystem::path& package_dir, const config& cfg,
                                                    sim_scheduler& scheduler, std::shared_ptr<fault_registry> faults = {});

}  // namespace calserve::device::sim
