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

kv_dtype_choice package_kv_choice(const package& p) {
    return p.kv.v_dtype == dtype::int8 ? kv_dtype_choice::s8v : kv_dtype_choice::bf16;
}

std::uint64_t kv_bytes_per_token_per_chip(const package& p, kv_dtype_choice kv) {
    const std::uint64_t tp = std::max<std::uint32_t>(p.topo.tensor_parallel, 1);
    const std::uint64_t heads = (p.kv.kv_heads + tp - 1) / tp;
    const bool s8 = kv == kv_dtype_choice::s8v;
    const std::uint64_t k_bytes = dtype_bytes(p.kv.k_dtype);
    const std::uint64_t v_bytes = s8 ? dtype_bytes(dtype::int8) : dtype_bytes(dtype::bf16);
    // A BF16 package planned as S8 V gets the reference model's scale: FP32.
    const std::uint64_t scale = !s8 ? 0 : p.kv.v_dtype == dtype::int8 ? p.kv.v_scale_bytes() : dtype_bytes(dtype::fp32);
    const std::uint64_t per_head = sat_add(sat_mul(p.kv.head_dim, k_bytes + v_bytes), scale);
    return sat_mul(std::uint64_t{p.kv.layers} * heads, per_head);
}

std::uint64_t kv_bytes_per_chip(const package& p, std::uint32_t batch, std::uint32_t context, kv_dtype_choice kv) {
    return sat_mul(sat_mul(kv_bytes_per_token_per_chip(p, kv), context), batch);
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

std::uint32_t max_batch(const package& p, std::uint32_t context, kv_dtype_choice kv, const capacity_limits& limits) {
    const std::uint64_t per_row = kv_bytes_per_chip(p, 1, context, kv);
    std::uint64_t best = std::numeric_limits<std::uint32_t>::max();
    for (const auto& c : p.chips) {
        const std::uint64_t fixed = fixed_bytes(p, c, limits);
        if (fixed > limits.dram_bytes_per_chip || c.param_sram_bytes > limits.sram_bytes_per_chip) return 0;
        if (per_row == 0) continue;
        best = std::min(best, (limits.dram_bytes_per_chip - fixed) / per_row);
    }
    return p.chips.empty() ? 0 : static_cast<std::uint32_t>(best);
}

kv_comparison compare_kv_dtypes(const package& p, std::span<const std::uint32_t> batches, const capacity_limits& limits) {
    kv_comparison out;
    out.context = p.context;
    out.batches.assign(batches.begin(), batches.end());
    for (auto* fit : {&out.bf16, &out.s8v}) {
        fit->kv = fit == &out.bf16 ? kv_dtype_choice::bf16 : kv_dtype_choice::s8v;
        fit->bytes_per_token = kv_bytes_per_token_per_chip(p, fit->kv);
        fit->max_batch_at_context = max_batch(p, p.context, fit->kv, limits);
        for (auto b : batches) fit->max_context.push_back(max_context(p, b, fit->kv, limits));
    }
    return out;
}

std::uint32_t kv_slots_for(const package& p, std::uint32_t sequences, const capacity_limits& limits) {
    if (p.context == 0) return 1;
    const std::uint64_t per_row = std::min(max_context(p, sequences, package_kv_choice(p), limits), p.context);
    return static_cast<std::uint32_t>(std::max<std::uint64_t>(1, std::uint64_t{sequences} * per_row / p.context));
}

}  // namespace calserve::model::package
