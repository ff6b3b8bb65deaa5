#pragma once
//! Per-request sampling parameters, validated by the API layer (net/) before they
//! reach the sampler. Defaults are OpenAI's. The maths lives in model/sampling/sampling.hpp.
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace calserve::model {

struct sampling_params {
    float temperature = 1.0f;          // 0 = greedy
    float top_p = 1.0f;                // (0, 1]
    std::int32_t top_k = 0;            // 0 = off
    float min_p = 0.0f;                // [0, 1]
    float presence_penalty = 0.0f;     // [-2, 2]
    float frequency_penalty = 0.0f;    // [-2, 2]
    float repetition_penalty = 1.0f;   // (0, 2]; 1 = off
    std::optional<std::uint64_t> seed; // none = derived from the request id
    std::vector<std::pair<std::int32_t, float>> logit_bias;  // token -> bias in [-100, 100]
    bool logprobs = false;
    std::int32_t top_logprobs = 0;     // [0, 20]

    bool greedy() const { return temperature == 0.0f; }
};

/// A device's sampling head can draw this row (docs/device.md "Sampling head"): the draw
/// needs only the row's logits, temperature, top-k/top-p/min-p and RNG, never the
/// token history (penalties), a bias or logprobs. A token mask (grammar) is the
/// caller's to rule out.
inline bool head_can_sample(const sampling_params& p) {
    return p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f && p.repetition_penalty == 1.0f &&
           p.logit_bias.empty() && !p.logprobs && p.top_logprobs == 0;
}

}  // namespace calserve::model
