#pragma once
//! Capacity planner (document 001 stage 7): does a package fit the device at a
//! given batch and context, chip by chip?
//!
//!   parameter_bytes_per_chip + KV_bytes_per_chip(batch, context, dtype)
//!   + peak_workspace_per_chip + IO_and_command_buffers + allocator_guard
//!   <= usable_memory_per_chip
//!
//! Role: pure functions over a loaded `package`, called by `calserve plan`, the
//! validator (gate E), the device simulator (configure) and the server (admission).
//! Fault model: none; arithmetic saturates instead of wrapping, so absurd inputs
//! give "does not fit", never a false "fits".
//! KV bytes come from the package's layout: K in its k_dtype, V in BF16 (`bf16`) or
//! S8 plus one scale (the layout's v_scale_dtype, FP32 by default) per (layer, KV head,
//! position) (`s8v`); only V shrinks, so the saving is V's share minus its scales, never
//! "KV halves" (document 001 stage 7).
//! Invariants: KV bytes grow linearly in batch and context; `max_context` returns
//! the largest C with plan(batch, C).fits (0 when even one token does not fit);
//! `max_batch` the largest B with plan(B, context).fits.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "model/package/package.hpp"

namespace calserve::model::package {

enum class kv_dtype_choice : std::uint8_t { bf16, s8v };  // s8v: K as the package's K, S8 V-cache
std::string_view to_string(kv_dtype_choice k);
// What the package itself stores: s8v when its V dtype is int8.
kv_dtype_choice package_kv_choice(const package& p);

inline constexpr std::uint64_t k_default_guard_bytes = 256ull << 20;

struct capacity_limits {
    std::uint64_t dram_bytes_per_chip = 16ull << 30;  // usable DRAM per chip
    std::uint64_t sram_bytes_per_chip = 64ull << 20;
    std::uint64_t guard_bytes = k_default_guard_bytes;  // allocator guard per chip
};

struct chip_budget {
    std::uint32_t chip = 0;
    std::uint64_t params = 0;           // DRAM part of the parameter block
    std::uint64_t kv = 0;
    std::uint64_t workspace = 0;        // peak over submodels
    std::uint64_t io_buffers = 0;       // ping + pong of every submodel I/O tensor
    std::uint64_t command_buffers = 0;  // command binaries + CCU programs
    std::uint64_t guard = 0;
    std::uint64_t total = 0;
    std::uint64_t usable = 0;
    std::uint64_t sram_params = 0;
    std::uint64_t sram_usable = 0;
    bool fits = false;
};

struct capacity_plan {
    std::uint32_t batch = 1;
    std::uint32_t context = 0;
    kv_dtype_choice kv = kv_dtype_choice::bf16;
    std::vector<chip_budget> chips;
    bool fits = false;
};

// KV bytes of one position of one sequence on one chip: layers x KV heads per chip x
// (head_dim x (K bytes + V bytes) + V scale bytes).
std::uint64_t kv_bytes_per_token_per_chip(const package& p, kv_dtype_choice kv);
std::uint64_t kv_bytes_per_chip(const package& p, std::uint32_t batch, std::uint32_t context, kv_dtype_choice kv);
capacity_plan plan_capacity(const package& p, std::uint32_t batch, std::uint32_t context, kv_dtype_choice kv,
                            const capacity_limits& limits);
// Largest context (tokens) that fits at this batch; not capped by the package's context.
std::uint32_t max_context(const package& p, std::uint32_t batch, kv_dtype_choice kv, const capacity_limits& limits);
// Largest batch whose rows of `context` tokens fit (0 when one does not).
std::uint32_t max_batch(const package& p, std::uint32_t context, kv_dtype_choice kv, const capacity_limits& limits);

// BF16 V against S8 V on one package (issue 29; `calserve plan`, `calserve inspect`).
struct kv_dtype_fit {
    kv_dtype_choice kv = kv_dtype_choice::bf16;
    std::uint64_t bytes_per_token = 0;           // per chip, one position of one sequence
    std::uint32_t max_batch_at_context = 0;      // at kv_comparison::context
    std::vector<std::uint32_t> max_context;      // per kv_comparison::batches entry, not capped
};
struct kv_comparison {
    std::uint32_t context = 0;                   // the calbin context
    std::vector<std::uint32_t> batches;
    kv_dtype_fit bf16, s8v;
};
kv_comparison compare_kv_dtypes(const package& p, std::span<const std::uint32_t> batches, const capacity_limits& limits);
// KV slots (sequences of the full package context) a region for `sequences` concurrent rows
// needs: each row gets max_context(sequences) tokens, capped by the calbin context; at least 1.
// `calserve pack` sizes the tiny presets' KV with it (docs/package-format.md, profiles).
std::uint32_t kv_slots_for(const package& p, std::uint32_t sequences, const capacity_limits& limits);

}  // namespace calserve::model::package
