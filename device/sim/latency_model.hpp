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
//! decode reads only the active experts' weights while a long prefill reads all; with
//! `routing_skew` > 0 (Zipf popularity) the popular experts are shared and fewer
//! distinct ones are read, whatever the placement.
//! `device.sim.cost_experts=all` prices every step as a dense model of the same
//! bytes would cost (every expert read and computed for every token): a what-if
//! for capacity planning, never the default.
//!
//! Placement (`device.sim.placement`, docs/twin.md "Placements"): how the model is
//! laid over the package's N chips. Placement changes cost and layout, never tokens.
//!   tp  (today's packages) every layer split over the chips; 2 syncs per layer, each
//!       moving the rows' hidden vectors (an all-reduce).
//!   ep  experts partitioned (expert e on chip e mod N), attention and embeddings
//!       replicated with the rows split over the chips; per layer a dispatch and a
//!       combine all-to-all (`all_to_all_us` each) carrying every (row, expert) pair
//!       whose expert is remote. Expert popularity is Zipf(`routing_skew`) over the
//!       expert index (0 = uniform): the hottest chip's share of the expert work sets
//!       the step (`imbalance()` = hottest share x N). With `routing` (counts a
//!       workload recorded on the CPU reference model, routing_load.hpp) the skew is
//!       not used: each layer pays its own hottest chip's experts and (row, expert)
//!       pairs, and `imbalance()` is the mean over layers.
//!   pp  layers split into N stages; one link crossing per stage boundary per
//!       micro-batch; a step of `rows` rows runs m = `micro_batches` (0: min(rows, N))
//!       micro-batches, (m + N - 1) stage times on the critical path (the bubble), each
//!       stage reading its weights once per micro-batch.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "device/sim/routing_load.hpp"
#include "device/types.hpp"

namespace calserve::device::sim {

enum class parallel_kind : std::uint8_t { tp, ep, pp };
std::string_view to_string(parallel_kind p);
std::optional<parallel_kind> parse_parallel(std::string_view text);

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
    parallel_kind placement = parallel_kind::tp;
    bool placement_set = false;  // device.sim.placement named one; else the package's manifest decides
    double routing_skew = 0;   // ep: Zipf exponent of expert popularity (0 = uniform)
    // ep: recorded routing counts; when set (and matching the package) they replace the skew.
    std::shared_ptr<const model::routing_counts> routing;
    double all_to_all_us = 10; // ep: latency of one dispatch or combine all-to-all
    int micro_batches = 0;     // pp: micro-batches per step (0 = min(rows, chips))

    static latency_constants from_config(const config& cfg);
    // These constants for a package: its manifest's placement unless the config named one.
    latency_constants for_package(const package_spec& spec) const;
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
    // A scoring prefill's extra over a plain one (device/scoring.hpp): every position's
    // BF16 logits written to DRAM and read twice (log-softmax normaliser, then the
    // target and the top-N), on the slowest chip's bandwidth. The LM head's flops over
    // every position are already in `step` (it prices 2 x parameters per token, LM
    // head included, for every prefill position). `step_ms` >= 0 replaces it.
    double score_ms(std::int64_t positions) const;
    double h2d_ms(std::uint64_t bytes) const;
    double d2h_ms(std::uint64_t bytes) const;
    double configure_ms() const;
    // A seq copy of `tokens` positions: their KV bytes read and written in DRAM, per chip.
    double kv_copy_ms(std::int64_t tokens) const;
    // Fraction of parameter bytes a step over `tokens` tokens reads (1 for dense).
    double active_weight_fraction(std::int64_t tokens) const;
    // Parameter count the shape implies (for FLOPs); 0 when the shape is unknown.
    double estimated_parameters() const { return params_total_; }
    // Placement figures: parameter bytes chip `chip` holds, bytes one token moves over
    // the chip link per step (all layers), and ep's hottest chip share x chips (1 = even).
    std::uint64_t placed_parameter_bytes(std::uint32_t chip) const;
    double link_bytes_per_token() const;
    double imbalance() const;
    // ep with routing counts: per layer hottest chip load / mean chip load; else empty.
    const std::vector<double>& layer_imbalance() const { return routing_.imbalance; }

private:
    std::uint64_t slowest_chip_bytes() const;
    double active_parameters_per_token() const;
    double touched_experts(double tokens, std::optional<std::size_t> chip) const;  // share of the experts read
    double attention_flops(std::int64_t tokens, std::int64_t past) const;
    step_breakdown finish(step_breakdown b) const;  // times from the figures, then the override
    // A pass of `rows` token rows (decode rows or prompt tokens) reading `kv_tokens` KV
    // positions with `attention` FLOPs, under ep or pp.
    step_breakdown placed_step(double rows, double kv_tokens, double attention) const;
    step_breakdown expert_parallel(double rows, double kv_tokens, double attention) const;
    step_breakdown pipeline_parallel(double rows, double kv_tokens, double attention) const;
    double chips() const { return std::max<double>(1.0, spec_.chip_count); }

    latency_constants c_;
    package_spec spec_;  // a copy: the model outlives whatever built it
    double params_total_ = 0;
    double expert_fraction_ = 0;  // share of parameters in routed experts
    std::vector<double> expert_share_;  // ep: popularity of each expert (sums to 1)
    std::vector<double> chip_load_;     // ep: share of routed (row, expert) pairs per chip
    routing_load routing_;              // from c_.routing when it matches the package; else empty
};

// Human-readable listing of every constant (for inspect and start-up logs).
std::vector<std::pair<std::string, std::string>> describe_constants(const latency_constants& c);

}  // namespace calserve::device::sim
