#pragma once
//! Routing counts of an MoE model on a workload: per layer, how many token rows the
//! router sent to each expert (docs/twin.md, "Routing counts"). The CPU reference
//! model fills one when asked (`transformer::record_routing`); `calserve plan
//! --placement ep --routing FILE` reads one to price expert parallelism with the
//! workload's own hot experts instead of a skew parameter.
//!
//! Fault model: a file that is not this format is a `parse_error` naming what is
//! wrong; nothing here aborts. Invariants: `experts` has `layers()` rows of equal
//! length; with a top-k router each layer's counts sum to tokens[layer] x top_k.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "config/result.hpp"

namespace calserve::model {

struct routing_counts {
    std::string model;                              // the model's name, informative only
    std::int64_t top_k = 0;                         // experts each token is routed to
    std::vector<std::uint64_t> tokens;              // [layer]: token rows routed
    std::vector<std::vector<std::uint64_t>> experts;  // [layer][expert]: rows routed to the expert

    std::size_t layers() const { return experts.size(); }
    std::size_t num_experts() const { return experts.empty() ? 0 : experts.front().size(); }
    // Adds one forward pass of `rows` token rows at `layer`; rows_per_expert[e] rows chose e.
    void add(std::size_t layer, std::uint64_t rows, std::span<const std::uint64_t> rows_per_expert);
};

// A zeroed table for `layers` x `num_experts` (every layer MoE).
routing_counts make_routing_counts(std::size_t layers, std::size_t num_experts, std::int64_t top_k);

// The JSON file: {"format": "calserve-routing-counts", "version": 1, "model", "top_k",
// "layers", "experts", "tokens": [per layer], "counts": [[per expert] per layer]}.
std::string to_json_text(const routing_counts& c);
result<routing_counts> parse_routing_counts(std::string_view text);

}  // namespace calserve::model
