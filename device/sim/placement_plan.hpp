#pragma once
//! Placement plan (docs/twin.md, "Placements"): how one MoE package would sit on
//! its chips as tensor-parallel (the packages' own layout), expert-parallel or
//! pipeline-parallel, and one model per chip where it fits. Per placement: bytes
//! per chip (parameters as that placement splits them, KV, workspace and the
//! package's buffers), the largest batch at the calbin context and the largest
//! context at batch 1, bytes per token over the chip link, modelled prefill and
//! decode step times at batch 1..16, ep's hot-expert imbalance, and the fault
//! domain (what a lost chip stops).
//!
//! Role: pure arithmetic over a loaded package and the latency model, called by
//! `calserve plan --placement`. The simulator serves the same costs when
//! `device.sim.placement` is set, so a what-if replay compares placements on a
//! recorded workload with the numbers printed here.
//! Fault model: none; a placement that does not fit is a row with `fits` false.
//! Invariants: KV bytes per token per chip are the same in all three (tp splits KV
//! heads, pp layers, ep the rows); tp's parameter bytes are the package's own.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "device/sim/latency_model.hpp"
#include "device/types.hpp"
#include "model/package/capacity.hpp"

namespace calserve::device::sim {

inline constexpr std::array<std::int64_t, 5> k_plan_batches = {1, 2, 4, 8, 16};

struct placement_chip {
    std::uint64_t params = 0, kv = 0, workspace = 0, buffers = 0, guard = 0, total = 0, usable = 0;
    bool fits = false;
};

struct placement_row {
    std::string placement;                  // tp | ep | pp | replica
    double routing_skew = 0;                // ep
    double imbalance = 1;                   // ep: hottest chip's share of expert work x chips
    bool routing_counts = false;            // ep: priced from recorded counts (routing_skew unused)
    std::vector<double> layer_imbalance;    // ep with routing counts: per layer
    std::vector<placement_chip> chips;      // at batch 1 x calbin context
    bool fits = false;
    std::uint32_t max_batch_at_context = 0; // at the calbin context
    std::uint64_t max_context_batch1 = 0;   // not capped by the calbin context
    double link_bytes_per_token = 0;
    double prefill_ms = 0;                  // one prompt of `prompt_tokens`
    std::array<double, k_plan_batches.size()> decode_step_ms{};  // every row at `past` tokens
    std::string fault_domain;
};

struct placement_query {
    std::uint32_t context = 0;        // 0: the calbin context
    std::int64_t past = 1024;         // decode rows' tokens so far
    std::int64_t prompt_tokens = 2048;
    model::package::kv_dtype_choice kv = model::package::kv_dtype_choice::bf16;
    model::package::capacity_limits limits;
};

placement_row plan_placement(const model::package::package& pkg, const package_spec& spec, latency_constants c,
                             parallel_kind placement, const placement_query& q);
// One model per chip (every parameter byte on one chip): fits only when the whole model does.
placement_row plan_replica(const model::package::package& pkg, const package_spec& spec, latency_constants c,
                           const placement_query& q);

}  // namespace calserve::device::sim
