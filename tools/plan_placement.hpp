#pragma once
//! `calserve plan PACKAGE --placement tp|ep|pp|all`: the placement rows of
//! device/sim/placement_plan.hpp as a table or JSON (docs/twin.md, "Placements").
#include <string>
#include <vector>

#include "config/config.hpp"
#include "model/package/capacity.hpp"

namespace calserve::tools {

struct placement_cli {
    std::string placement;                 // tp | ep | pp | all
    std::vector<double> skews = {1.0, 2.0};  // ep rows at these routing skews
    bool skews_given = false;              // --skews on the command line (shown beside --routing)
    std::string routing;                   // routing counts JSON (`reference --routing`): an ep row priced by it
    std::int64_t past = 1024, prompt_tokens = 2048;
};

// Prints the rows; exit code 0, or 2 when the package's figures or the routing counts
// cannot be read or do not match the package.
int run_plan_placement(const model::package::package& p, const config& cfg, const model::package::capacity_limits& l,
                       model::package::kv_dtype_choice kv, std::uint32_t context, const placement_cli& o, bool json_out);

}  // namespace calserve::tools
