#pragma once
//! Expert-parallel load from recorded routing counts (docs/twin.md, "Routing counts").
//! `calserve reference --routing` records, per layer, how many token rows the router
//! sent to each expert; under ep (expert e on chip e mod N) each layer's dispatch and
//! combine wait for that layer's hottest chip, so the step pays, layer by layer, the
//! hottest chip's expert work and the experts it reads.
//!
//! Role: pure arithmetic for latency_model (ep) and `calserve plan --routing`.
//! Fault model: a table that does not match the package (layers, experts, top_k, a
//! layer without tokens) is an `invalid_argument` from check_routing naming the
//! mismatch; the model never sees one. Invariants: every layer's `selected` sums to
//! top_k (shares of tokens); `imbalance[l]` = hottest chip load / mean chip load >= 1.
#include <cstddef>
#include <vector>

#include "config/result.hpp"
#include "device/types.hpp"
#include "model/core/routing_counts.hpp"

namespace calserve::device::sim {

// ep's expert-to-chip assignment: expert e on chip e mod N.
inline std::size_t expert_chip(std::size_t expert, std::size_t chips) { return chips > 0 ? expert % chips : 0; }

struct routing_load {
    std::vector<std::vector<double>> selected;  // [layer][expert]: share of the layer's tokens routed there
    std::vector<std::size_t> hot_chip;          // [layer]: chip with the most (row, expert) pairs
    std::vector<double> hot_pairs;              // [layer]: its share of the layer's pairs
    std::vector<double> imbalance;              // [layer]: hot_pairs x N
    std::size_t chips = 1;

    bool empty() const { return selected.empty(); }
    double mean_imbalance() const;
    double mean_hot_pairs() const;
    // Mean over layers of the share of the layer's experts the hottest chip reads when
    // `rows` tokens pass: sum over its experts of 1 - (1 - selected)^rows, over E.
    double hot_weight_share(double rows) const;
    // Share of all experts that `rows` tokens touch (mean over layers).
    double touched(double rows) const;
};

void_result check_routing(const package_spec& spec, const model::routing_counts& counts);
routing_load make_routing_load(const model::routing_counts& counts, std::size_t chips);

}  // namespace calserve::device::sim
