#pragma once
//! Speculative decoding's settings from `runtime.speculative.*` (docs/config.md): the
//! drafter each sequence gets and the drafting policy's options.
#include "config/config.hpp"
#include "model/speculative/draft_policy.hpp"
#include "model/speculative/drafter.hpp"

namespace calserve::model::speculative {

struct speculative_options {
    drafter_options drafter;
    policy_options policy;

    bool enabled() const { return drafter.kind != method::none; }
    static speculative_options from_config(const config& cfg);
};

}  // namespace calserve::model::speculative
