#pragma once
//! Board placement: several packages on one board, chip by chip (several models,
//! docs/generations.md). Each package takes `topo.chips` distinct chips; on every
//! chip the packages placed there share the usable memory, and the allocator guard
//! is kept once per chip, not once per package.
//!
//!   guard + sum over packages on the chip of (params + KV + workspace + buffers) <= usable
//!
//! A package either names its chips or takes the first that fit (lowest chip
//! numbers first, packages in the order given). Resident bytes already on the board
//! (a serving generation while its successor loads) count against the chips.
//! Role: pure arithmetic over loaded packages, called by `calserve serve` at
//! start-up and by the model router before loading a generation.
//! Fault model: none; a set that does not fit is a result with `fits == false` and a
//! text plan saying which chip is over and by what.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/package/capacity.hpp"

namespace calserve::model::package {

struct placement_request {
    std::string name;
    const package* pkg = nullptr;
    std::vector<std::uint32_t> chips;  // empty = first fit; else exactly topo.chips board chips
};

struct placed_model {
    std::string name;
    std::vector<std::uint32_t> chips;       // board chip of package chip i
    std::vector<std::uint64_t> bytes;       // bytes it takes on each of those chips (guard excluded)
};

struct board_placement {
    bool fits = false;
    std::vector<placed_model> models;       // in request order; chips empty for one that did not fit
    std::vector<std::uint64_t> used;        // per board chip: guard + resident + placed
    std::uint64_t usable = 0;               // per chip
    std::string plan;                       // human-readable per-chip plan (and the reason when not fitting)
};

// Bytes one package needs on each of its chips at its own KV region, guard excluded.
std::vector<std::uint64_t> package_chip_bytes(const package& p, const capacity_limits& limits);

// `resident[c]`: bytes already held on board chip c by models not in `requests` (guard excluded).
board_placement place_packages(std::span<const placement_request> requests, std::uint32_t board_chips,
                               const capacity_limits& limits, std::span<const std::uint64_t> resident = {});

// "0,1" -> {0, 1}; empty text -> {} (first fit). Refuses duplicates and chips >= board_chips.
result<std::vector<std::uint32_t>> parse_chip_list(std::string_view text, std::uint32_t board_chips);

}  // namespace calserve::model::package
