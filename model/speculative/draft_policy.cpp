// The drafting policy (draft_policy.hpp).
#include "model/speculative/draft_policy.hpp"

#include <algorithm>
#include <cmath>

namespace calserve::model::speculative {

acceptance initial_acceptance(const policy_options& o) { return acceptance{std::clamp(o.initial_acceptance, 0.0, 1.0), 0}; }

double expected_tokens(double rate, std::int64_t k) {
    double sum = 1, term = 1;
    for (std::int64_t i = 0; i < k; ++i) {
        term *= rate;
        sum += term;
    }
    return sum;
}

double position_cost(double plain, double verify, std::int64_t drafts, double fixed) {
    if (!(plain > 0) || !(verify > 0) || drafts < 1) return fixed;
    return std::max(0.0, (verify - plain) / (plain * double(drafts)));
}

std::int64_t draft_length(const policy_options& o, const acceptance& a, const step_facts& f) {
    if (!o.enabled || o.max_drafts <= 0 || f.live_rows > o.max_batch || f.compute_bound || f.tokens_left <= 1)
        return 0;
    const std::int64_t most = std::min(o.max_drafts, f.tokens_left - 1);
    const double cost = std::max(0.0, f.position_cost);
    std::int64_t best_k = 0;
    double best = 1;
    for (std::int64_t k = 1; k <= most; ++k) {
        const double gain = expected_tokens(a.rate, k) / (1 + cost * double(k));
        if (gain > best) {
            best = gain;
            best_k = k;
        }
    }
    if (best_k > 0 && best >= o.min_gain) return best_k;
    return o.probe_every > 0 && a.plain_steps >= o.probe_every ? 1 : 0;
}

void observe(const policy_options& o, acceptance& a, std::int64_t drafted, std::int64_t accepted) {
    if (drafted <= 0) {
        ++a.plain_steps;
        return;
    }
    a.plain_steps = 0;
    accepted = std::clamp<std::int64_t>(accepted, 0, drafted);
    const std::int64_t trials = accepted + (accepted < drafted ? 1 : 0);
    const double seen = double(accepted) / double(trials);
    const double w = std::clamp(o.smoothing, 0.0, 1.0);
    a.rate = (1 - w) * a.rate + w * seen;
}

}  // namespace calserve::model::speculative
