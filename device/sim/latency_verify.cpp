// Latency model: the verify step of speculative decoding (latency_model.hpp).
#include <algorithm>

#include "device/sim/latency_model.hpp"

namespace calserve::device::sim {

// A compiled verify program has one shape: every row (padding included) computes the
// job's widest run, as a padded decode row computes its one token. The weights are read
// once for all of those positions (MoE: the experts they touch); each live row reads its
// KV and writes its run; attention is causal within the run.
step_breakdown latency_model::verify_batch_step(std::span<const std::int64_t> pasts,
                                                std::span<const std::int64_t> runs, std::int64_t batch) const {
    std::int64_t width = 1;
    for (auto r : runs) width = std::max(width, r);
    step_breakdown b;
    const double chips = std::max<double>(1.0, spec_.chip_count);
    const double rows = static_cast<double>(std::max<std::int64_t>({batch, static_cast<std::int64_t>(pasts.size()), 1}));
    const double positions = rows * static_cast<double>(width);
    b.weight_bytes = static_cast<double>(slowest_chip_bytes()) * active_weight_fraction(static_cast<std::int64_t>(positions));
    double kv_tokens = 0, attention = 0;
    for (std::size_t i = 0; i < pasts.size(); ++i) {
        const std::int64_t run = i < runs.size() ? std::max<std::int64_t>(1, runs[i]) : 1;
        kv_tokens += static_cast<double>(pasts[i]) + 2.0 * static_cast<double>(run);
        attention += attention_flops(width, pasts[i]);
    }
    b.kv_bytes = static_cast<double>(spec_.kv.bytes_per_token()) * kv_tokens / chips;
    b.syncs = chips > 1 ? 2.0 * static_cast<double>(spec_.kv.layers) : 0.0;
    b.d2d_bytes = b.syncs * positions * static_cast<double>(spec_.hidden_size) * 2.0;
    b.flops = (2.0 * active_parameters_per_token() * positions + attention) / chips;
    return finish(b);
}

}  // namespace calserve::device::sim
