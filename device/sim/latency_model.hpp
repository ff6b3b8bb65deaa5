#pragma once
//! Latency model of the simulated NPU. Pure functions of the package figures and
//! a set of constants, every one of them a `device.sim.*` config key (defaults are
//! labelled assumptions, not vendor figures) and printed by `calserve inspect`.
//!
//! One infer step on a chip costs
//!   weight bytes read / DRAM bw + KV bytes read and written / DRAM bw
//!   + syncs x sync cost + FLOPs / peak + D2D bytes / D2D bw + launch;
//! the step time of a tensor-parallel package is the slowest chip's. Host links:
//! H2D and D2H are bytes / PCIe bw; configure is parameter bytes / PCIe bw.
//! `step_ms` / `d2h_ms` >= 0 replace the modelled compute / output-copy times.
//!
//! MoE: a step with T tokens touches an expected 1 - (1 - k/E)^T of the experts, so
//! decode reads only the active experts' weights while a long prefill reads all.
//! `device.sim.cost_experts=all` prices every step as a dense model of the same
//! bytes would cost (every expert read and computed for every token): a what-if
//! for capacity planning, never the default.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "device/types.hpp"

namespace calserve::device::sim {

struct latency_constants {
    double dram_gbps = 200;    // per chip
    double pcie_gbps = 16;
    double d2d_gbps = 32;
    double peak_tflops = 64;   // per chip
    double sync_us = 5;
    double launch_us = 20;
    double step_ms = -1;       // >= 0 overrides compute
    double d2h_ms = -1;        // >= 0 overrides the output copy
    bool all_experts = false;  // price an MoE as a dense model of the same bytes (what-if)

    static latency_constants from_config(const config& cfg);
};

struct step_breakdown {
    double weights_ms = 0;
    double kv_ms = 0;
    double sync_ms = 0;
    double flops_ms = 0;
    double d2d_ms = 0;
    double launch_ms = 0;
    double total_ms = 0;
    bool overridden = false;  // step_ms replaced the model
    // Inputs of the figures, per chip of the slowest chip.
    double weight_bytes = 0;
    double kv_bytes = 0;
    double syncs = 0;
    double flops = 0;
    double d2d_bytes = 0;
};

class latency_model {
public:
    latency_model(const package_spec& spec, latency_constants constants);

    const latency_constants& constants() const { return c_; }
    // Compute time of one step that appends `tokens` to a sequence holding `past`.
    // A one-token decode is decode_batch_step({past}, 1).
    step_breakdown step(submodel_kind kind, std::int64_t tokens, std::int64_t past) const;
    // One decode step of a batch-`batch` program whose live rows hold `pasts`
    // (padding rows have no entry): weights read once (MoE: the experts `batch`
    // tokens touch), KV read per live row, compute and D2D per row (padding
    // included), launch and syncs once. step_ms >= 0 replaces it (one step, any batch).
    step_breakdown decode_batch_step(std::span<const std::int64_t> pasts, std::int64_t batch) const;
    // A verify step (speculative decoding, latency_verify.cpp): live row i appends runs[i]
    // positions (1 + its drafts) to pasts[i]; every row computes the widest run.
    step_breakdown verify_batch_step(std::span<const std::int64_t> pasts, std::span<const std::int64_t> runs,
                                     std::int64_t batch) const;
    // The sampling head over `rows` rows (docs/device.md "Sampling head"): two passes over
    // each row's BF16 logits in DRAM (the cut, then the draw), on the slowest chip's
    // bandwidth. Part of the program: `step_ms` >= 0 replaces it with the rest.
    double head_ms(std::int64_t rows) const;
    double h2d_ms(std::uint64_t bytes) const;
    double d2h_ms(std::uint64_t bytes) const;
    double configure_ms() const;
    // A seq copy of `tokens` positions: their KV bytes read and written in DRAM, per chip.
    double kv_copy_ms(std::int64_t tokens) const;
    // Fraction of parameter bytes a step over `tokens` tokens reads (1 for dense).
    double active_weight_fraction(std::int64_t tokens) const;
    // Parameter count the shape implies (for FLOPs); 0 when the shape is unknown.
    double estimated_parameters() const { return params_total_; }

private:
    std::uint64_t slowest_chip_bytes() const;
    double active_parameters_per_token() const;
    double attention_flops(std::int64_t tokens, std::int64_t past) const;
    step_breakdown finish(step_breakdown b) const;  // times from the figures, then the override

    latency_constants c_;
    package_spec spec_;  // a copy: the model outlives whatever built it
    double params_total_ = 0;
    double expert_fraction_ = 0;  // share of parameters in routed experts
};

// Human-readable listing of every constant (for inspect and start-up logs).
std::vector<std::pair<std::string, std::string>> describe_constants(const latency_constants& c);

}  // namespace calserve::device::sim
