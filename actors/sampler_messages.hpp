#pragma once
//! Messages the Sampler accepts.
#include <variant>

#include "actors/job_context.hpp"

namespace calserve::actors {

// Sample the next token of the job's sequence from the job's BF16 logits.
struct sm_sample {
    job_ptr job;
};
using sampler_message = std::variant<sm_sample>;

}  // namespace calserve::actors
