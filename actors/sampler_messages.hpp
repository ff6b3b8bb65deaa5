#pragma once
//! Messages the Sampler accepts.
#include <variant>

#include "actors/job_context.hpp"

namespace calserve::actors {

// Sample the next token of every live row of the job the device did not draw: from the
// job's BF16 logits, or from the head's top K and log_z (rows in mode top_k).
struct sm_sample {
    job_ptr job;
};
using sampler_message = std::variant<sm_sample>;

}  // namespace calserve::actors
