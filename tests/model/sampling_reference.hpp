#pragma once
// An independent, slow, double-precision statement of the sampling rules (full sorts
// allowed here), and a chi-square goodness-of-fit check, for the sampler tests.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "model/sampling/sampling.hpp"

namespace calserve::test {

inline bool sanitized() { return std::getenv("CALSERVE_SANITIZED") != nullptr; }

/// Penalised logits: bias, HF repetition over distinct prompt+generated, OpenAI frequency/presence.
inline std::vector<double> penalised(const std::vector<float>& logits, const model::sampling_params& sp,
                                     const std::vector<std::int32_t>& prompt,
                                     const std::vector<std::int32_t>& generated) {
    std::vector<double> l(logits.begin(), logits.end());
    for (const auto& [t, b] : sp.logit_bias) l[static_cast<std::size_t>(t)] += b;
    std::set<std::int32_t> distinct(prompt.begin(), prompt.end());
    distinct.insert(generated.begin(), generated.end());
    for (const std::int32_t t : distinct) {
        double& x = l[static_cast<std::size_t>(t)];
        x = x < 0 ? x * sp.repetition_penalty : x / sp.repetition_penalty;
    }
    std::set<std::int32_t> gen_distinct(generated.begin(), generated.end());
    for (const std::int32_t t : gen_distinct) {
        const auto count = static_cast<double>(std::count(generated.begin(), generated.end(), t));
        l[static_cast<std::size_t>(t)] -= count * sp.frequency_penalty + sp.presence_penalty;
    }
    return l;
}

/// The final distribution (zeros outside the support), temperature > 0.
inline std::vector<double> reference_distribution(const std::vector<double>& l, const model::sampling_params& sp) {
    const std::size_t n = l.size();
    const double m = *std::max_element(l.begin(), l.end());
    std::vector<double> w(n);
    for (std::size_t i = 0; i < n; ++i) w[i] = std::exp((l[i] - m) / sp.temperature);
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return w[a] > w[b]; });
    std::size_t len = n;
    if (sp.top_k > 0 && static_cast<std::size_t>(sp.top_k) < n) len = static_cast<std::size_t>(sp.top_k);
    if (sp.top_p < 1.0f) {
        double mass = 0;
        for (std::size_t j = 0; j < len; ++j) mass += w[order[j]];
        double cum = 0;
        for (std::size_t j = 0; j < len; ++j) {
            cum += w[order[j]];
            if (cum >= (sp.top_p - model::top_p_slack) * mass) {
                len = j + 1;
                break;
            }
        }
    }
    while (len > 1 && w[order[len - 1]] < sp.min_p * w[order[0]]) --len;
    std::vector<double> p(n, 0.0);
    double kept = 0;
    for (std::size_t j = 0; j < len; ++j) kept += w[order[j]];
    for (std::size_t j = 0; j < len; ++j) p[order[j]] = w[order[j]] / kept;
    return p;
}

/// Upper 0.1% point of chi-square(df), Wilson-Hilferty approximation.
inline double chi_square_critical(std::size_t df) {
    const double d = static_cast<double>(df);
    const double z = 3.0902;  // one-sided 0.999
    const double a = 2.0 / (9.0 * d);
    return d * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

struct fit {
    double statistic = 0;
    double critical = 0;
    std::size_t outside_support = 0;  // draws of zero-probability buckets
};

/// counts and expected probabilities per bucket; buckets with p == 0 must stay empty.
inline fit chi_square(const std::vector<std::size_t>& counts, const std::vector<double>& p) {
    fit f;
    double draws = 0;
    for (auto c : counts) draws += static_cast<double>(c);
    std::size_t buckets = 0;
    for (std::size_t i = 0; i < p.size(); ++i) {
        if (p[i] == 0.0) {
            f.outside_support += counts[i];
            continue;
        }
        const double e = draws * p[i];
        const double d = static_cast<double>(counts[i]) - e;
        f.statistic += d * d / e;
        ++buckets;
    }
    f.critical = chi_square_critical(buckets > 1 ? buckets - 1 : 1);
    return f;
}

}  // namespace calserve::test
