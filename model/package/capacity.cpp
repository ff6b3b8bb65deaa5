// Capacity planner: per-chip budget against usable memory.
#include "model/package/capacity.hpp"

#include <algorithm>
#include <limits>

namespace calserve::model::package {

namespace {

constexpr std::uint64_t k_max = std::numeric_limits<std::uint64_t>::max();

std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) { return a > k_max - b ? k_max : a + b; }
std::uint64_t sat_mul(std::uint64_t a, std::uint64_t b) { return (b != 0 && a > k_max / b) ? k_max : a * b; }

std::uint64_t io_bytes(const package& p) {
    std::uint64_t n = 0;
    for (const auto& m : p.submodels)
        for (const auto* list : {&m.inputs, &m.outputs})
            for (const auto& t : *list) n = sat_add(n, sat_mul(t.byte_size, 2));
    return n;
}

std::uint64_t peak_workspace(const package& p) {
    std::uint64_t n = 0;
    for (const auto& m : p.submodels) n = std::max(n, m.workspace_bytes_per_chip);
    return n;
}

std::uint64_t command_bytes(const package& p) {
    std::uint64_t n = 0;
    for (const auto& m : p.submodels) n = sat_add(n, m.command_bytes_per_chip);
    return n;
}

// Everything but KV on one chip.
std::uint64_t fixed_bytes(const package& p, const chip_info& c, const capacity_limits& l) {
    std::uint64_t n = sat_add(c.param_dram_bytes, peak_workspace(p));
    n = sat_add(n, io_bytes(p));
    n = sat_add(n, command_bytes(p));
    return sat_add(n, l.guard_bytes);
}

}  // namespace

std::string_view to_string(kv_dtype_choice k) { return k == kv_dtype_choice::bf16 ? "bf16" : "s8v"; }

std::uint64_t kv_bytes_per_chip(const package& p, std::uint32_t batch, std::uint32_t context, kv_dtype_choice kv) {
    const std::uint64_t tp = std::max<std::uint32_t>(p.topo.tensor_parallel, 1);
    const std::uint64_t heads = (p.kv.kv_heads + tp - 1) / tp;
    const std::uint64_t k_bytes = dtype_bytes(p.kv.k_dtype);
    const std::uint64_t v_bytes = kv == kv_dtype_choice::s8v ? 1 : dtype_bytes(p.kv.v_dtype);
    std::uint64_t n = sat_mul(std::uint64_t{p.kv.layers} * heads * p.kv.head_dim, k_bytes + v_bytes);
    return sat_mul(sat_mul(n, context), batch);
}

capacity_plan plan_capacity(const package& p, std::uint32_t batch, std::uint32_t context, kv_dtype_choice kv,
                            const capacity_limits& limits) {
    capacity_plan plan;
    plan.batch = batch;
    plan.context = context;
    plan.kv = kv;
    plan.fits = !p.chips.empty();
    for (const auto& c : p.chips) {
        chip_budget b;
        b.chip = c.index;
        b.params = c.param_dram_bytes;
        b.kv = kv_bytes_per_chip(p, batch, context, kv);
        b.workspace = peak_workspace(p);
        b.io_buffers = io_bytes(p);
        b.command_buffers = command_bytes(p);
        b.guard = limits.guard_bytes;
        b.total = sat_add(fixed_bytes(p, c, limits), b.kv);
        b.usable = limits.dram_bytes_per_chip;
        b.sram_params = c.param_sram_bytes;
        b.sram_usable = limits.sram_bytes_per_chip;
        b.fits = b.total <= b.usable && b.sram_params <= b.sram_usable;
        plan.fits = plan.fits && b.fits;
        plan.chips.push_back(b);
    }
    return plan;
}

std::uint32_t max_context(const package& p, std::uint32_t batch, kv_dtype_choice kv, const capacity_limits& limits) {
    std::uint64_t best = std::numeric_limits<std::uint32_t>::max();
    const std::uint64_t per_token = kv_bytes_per_chip(p, batch, 1, kv);
    for (const auto& c : p.chips) {
        const std::uint64_t fixed = fixed_bytes(p, c, limits);
        if (fixed > limits.dram_bytes_per_chip || c.param_sram_bytes > limits.sram_bytes_per_chip) return 0;
        if (per_token == 0) continue;
        best = std::min(best, (limits.dram_bytes_per_chip - fixed) / per_token);
    }
    return p.chips.empty() ? 0 : static_cast<std::uint32_t>(best);
}

std::uint32_t kv_slots_for(const package& p, std::uint32_t sequences, const capacity_limits& limits) {
    if (p.context == 0) return 1;
    const std::uint64_t per_row = std::min(max_context(p, sequences, kv_dtype_choice::bf16, limits), p.context);
    return static_cast<std::uint32_t>(std::max<std::uint64_t>(1, std::uint64_t{sequences} * per_row / p.context));
}

}  // namespace calserve::model::package
