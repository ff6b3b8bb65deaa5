// Host compute cost of simulator jobs; see host_cost.hpp.
#include "device/sim/host_cost.hpp"

#include <algorithm>

namespace calserve::device::sim {

double host_cost_model::work(std::int64_t tokens, std::span<const std::int64_t> pasts) {
    const double t = double(std::max<std::int64_t>(tokens, 0));
    double w = 0;
    for (auto p : pasts) w += t * (1.0 + (double(std::max<std::int64_t>(p, 0)) + t / 2) / k_attention_span);
    return w;
}

void host_cost_model::observe(job_kind kind, double work, double ns) {
    if (work <= 0 || ns <= 0) return;
    const double sample = ns / work;
    double& r = rate_[std::size_t(kind)];
    r = sample >= r ? sample : r + 0.1 * (sample - r);
}

double host_cost_model::rate_ns(job_kind kind) const {
    const double own = rate_[std::size_t(kind)];
    if (own > 0) return own;
    return rate_[std::size_t(kind == job_kind::prefill ? job_kind::decode : job_kind::prefill)];
}

double host_cost_model::estimate_ns(job_kind kind, double work) const { return rate_ns(kind) * std::max(work, 0.0); }

void host_cost_model::observe_step(double work, double ns) {
    if (work <= 0 || ns <= 0) return;
    constexpr double decay = 0.97;
    auto& s = steps_;
    s = {decay * s.n + 1, decay * s.x + work, decay * s.y + ns, decay * s.xx + work * work, decay * s.xy + work * ns};
}

double host_cost_model::step_estimate_ns(double work) const {
    const auto& s = steps_;
    if (s.n < 2) return 0;
    const double mx = s.x / s.n, my = s.y / s.n;
    const double var = s.xx / s.n - mx * mx, cov = s.xy / s.n - mx * my;
    if (!(var > 0.01 * mx * mx) || !(cov > 0)) return 0;  // steps alike in work, or noise: no slope
    const double rate = cov / var;
    const double fixed = std::max(0.0, my - rate * mx);
    return fixed + rate * std::max(work, 0.0);
}

}  // namespace calserve::device::sim
