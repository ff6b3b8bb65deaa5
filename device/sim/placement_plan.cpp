// Placement plan (see placement_plan.hpp).
#include "device/sim/placement_plan.hpp"

#include <algorithm>

namespace calserve::device::sim {
namespace pkg = calserve::model::package;
namespace {

const char* fault_domain_of(parallel_kind p) {
    switch (p) {
        case parallel_kind::tp: return "both chips: every layer needs both halves, a lost chip stops the model";
        case parallel_kind::ep:
            return "both chips: attention is replicated but a token routed to a lost chip's experts has no "
                   "answer, so a lost chip stops the model (dropping its experts would change the tokens)";
        case parallel_kind::pp: return "both chips: a lost stage breaks the pipeline, a lost chip stops the model";
    }
    return "";
}

// Budgets at batch 1 x context with `params[c]` on chip c, and the room left for KV.
void fill_chips(placement_row& row, const pkg::package& p, const std::vector<std::uint64_t>& params,
                const placement_query& q, std::uint32_t context) {
    const auto base = pkg::plan_capacity(p, 1, context, q.kv, q.limits);
    const auto kv_per_token = pkg::kv_bytes_per_token_per_chip(p, q.kv);
    std::uint64_t kv_room = UINT64_MAX;
    row.fits = true;
    for (std::size_t c = 0; c < params.size(); ++c) {
        const auto& b = base.chips[std::min(c, base.chips.size() - 1)];
        placement_chip chip;
        chip.params = params[c];
        chip.kv = std::uint64_t{context} * kv_per_token;
        chip.workspace = b.workspace;
        chip.buffers = b.io_buffers + b.command_buffers;
        chip.guard = b.guard;
        chip.usable = b.usable;
        chip.total = chip.params + chip.kv + chip.workspace + chip.buffers + chip.guard;
        chip.fits = chip.total <= chip.usable;
        row.fits = row.fits && chip.fits;
        const auto fixed = chip.params + chip.workspace + chip.buffers + chip.guard;
        kv_room = std::min(kv_room, chip.usable > fixed ? chip.usable - fixed : 0);
        row.chips.push_back(chip);
    }
    const std::uint64_t tokens = kv_per_token > 0 ? kv_room / kv_per_token : 0;
    row.max_context_batch1 = tokens;
    row.max_batch_at_context = context > 0 ? static_cast<std::uint32_t>(std::min<std::uint64_t>(tokens / context, UINT32_MAX)) : 0;
}

void fill_times(placement_row& row, const latency_model& m, const placement_query& q) {
    row.link_bytes_per_token = m.link_bytes_per_token();
    row.imbalance = m.imbalance();
    row.layer_imbalance = m.layer_imbalance();
    row.routing_counts = !row.layer_imbalance.empty();
    row.prefill_ms = m.step(submodel_kind::prefill, q.prompt_tokens, 0).total_ms;
    for (std::size_t i = 0; i < k_plan_batches.size(); ++i) {
        std::vector<std::int64_t> pasts(static_cast<std::size_t>(k_plan_batches[i]), q.past);
        row.decode_step_ms[i] = m.decode_batch_step(pasts, k_plan_batches[i]).total_ms;
    }
}

}  // namespace

placement_row plan_placement(const pkg::package& p, const package_spec& spec, latency_constants c,
                             parallel_kind placement, const placement_query& q) {
    c.placement = placement;
    c.step_ms = -1;  // the model, never a fixed step
    const latency_model m(spec, c);
    placement_row row;
    row.placement = std::string(to_string(placement));
    row.routing_skew = placement == parallel_kind::ep ? c.routing_skew : 0;
    row.fault_domain = spec.chip_count > 1 ? fault_domain_of(placement) : "one chip: the model";
    std::vector<std::uint64_t> params;
    for (std::uint32_t chip = 0; chip < std::max<std::uint32_t>(1, spec.chip_count); ++chip)  // tp: as `plan` counts it
        params.push_back(placement == parallel_kind::tp && chip < spec.chips.size() ? spec.chips[chip].parameter_dram_bytes
                                                                                  : m.placed_parameter_bytes(chip));
    fill_chips(row, p, params, q, q.context ? q.context : p.context);
    fill_times(row, m, q);
    return row;
}

placement_row plan_replica(const pkg::package& p, const package_spec& spec, latency_constants c, const placement_query& q) {
    c.placement = parallel_kind::tp;
    c.step_ms = -1;
    package_spec one = spec;
    one.chip_count = 1;
    one.chips = {chip_memory{spec.total_parameter_bytes(), 0}};
    const latency_model m(one, c);
    placement_row row;
    row.placement = "replica";
    row.fault_domain = "one chip: a lost chip stops its replica, the other keeps serving";
    // The whole model on each chip; KV per token is the package's total (no split).
    std::vector<std::uint64_t> params(std::max<std::uint32_t>(1, spec.chip_count), spec.total_parameter_bytes());
    fill_chips(row, p, params, q, q.context ? q.context : p.context);
    if (spec.chip_count > 1) {  // every KV head on the chip: twice the package's per-chip KV
        const auto context = std::uint64_t{q.context ? q.context : p.context};
        const auto kv_per_token = pkg::kv_bytes_per_token_per_chip(p, q.kv) * spec.chip_count;
        row.fits = true;
        for (auto& chip : row.chips) {
            chip.kv = context * kv_per_token;
            chip.total = chip.params + chip.kv + chip.workspace + chip.buffers + chip.guard;
            chip.fits = chip.total <= chip.usable;
            row.fits = row.fits && chip.fits;
        }
        row.max_context_batch1 /= spec.chip_count;
        row.max_batch_at_context /= spec.chip_count;
    }
    fill_times(row, m, q);
    row.link_bytes_per_token = 0;
    return row;
}

}  // namespace calserve::device::sim
