// Expert-parallel load from recorded routing counts (see routing_load.hpp).
#include "device/sim/routing_load.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace calserve::device::sim {
namespace {
double mean(const std::vector<double>& v) {
    return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}
}  // namespace

double routing_load::mean_imbalance() const { return empty() ? 1.0 : mean(imbalance); }
double routing_load::mean_hot_pairs() const { return mean(hot_pairs); }

double routing_load::hot_weight_share(double rows) const {
    std::vector<double> share;
    for (std::size_t l = 0; l < selected.size(); ++l) {
        double touched = 0;
        for (std::size_t e = hot_chip[l]; e < selected[l].size(); e += chips)
            touched += 1.0 - std::pow(1.0 - std::clamp(selected[l][e], 0.0, 1.0), rows);
        share.push_back(touched / static_cast<double>(selected[l].size()));
    }
    return mean(share);
}

double routing_load::touched(double rows) const {
    std::vector<double> share;
    for (const auto& layer : selected) {
        double touched = 0;
        for (double q : layer) touched += 1.0 - std::pow(1.0 - std::clamp(q, 0.0, 1.0), rows);
        share.push_back(touched / static_cast<double>(layer.size()));
    }
    return mean(share);
}

void_result check_routing(const package_spec& spec, const model::routing_counts& counts) {
    const auto mismatch = [](const std::string& what) {
        return make_error(status::invalid_argument, "routing counts do not match the package: " + what);
    };
    if (spec.num_experts <= 0) return mismatch("the package's model has no experts");
    if (counts.layers() != static_cast<std::size_t>(spec.kv.layers))
        return mismatch(std::to_string(counts.layers()) + " layers, the package has " + std::to_string(spec.kv.layers));
    if (counts.num_experts() != static_cast<std::size_t>(spec.num_experts))
        return mismatch(std::to_string(counts.num_experts()) + " experts per layer, the package has " +
                        std::to_string(spec.num_experts));
    if (spec.experts_per_token > 0 && counts.top_k != spec.experts_per_token)
        return mismatch("top_k " + std::to_string(counts.top_k) + ", the package routes each token to " +
                        std::to_string(spec.experts_per_token));
    for (std::size_t l = 0; l < counts.layers(); ++l) {
        const auto pairs = std::accumulate(counts.experts[l].begin(), counts.experts[l].end(), std::uint64_t{0});
        if (counts.tokens[l] == 0 || pairs == 0) return mismatch("layer " + std::to_string(l) + " has no routed tokens");
    }
    return {};
}

routing_load make_routing_load(const model::routing_counts& counts, std::size_t chips) {
    routing_load r;
    r.chips = std::max<std::size_t>(1, chips);
    for (std::size_t l = 0; l < counts.layers(); ++l) {
        const auto& row = counts.experts[l];
        const double tokens = static_cast<double>(std::max<std::uint64_t>(1, counts.tokens[l]));
        const double pairs = std::max(1.0, static_cast<double>(std::accumulate(row.begin(), row.end(), std::uint64_t{0})));
        std::vector<double> selected, load(r.chips, 0.0);
        for (std::size_t e = 0; e < row.size(); ++e) {
            selected.push_back(static_cast<double>(row[e]) / tokens);
            load[expert_chip(e, r.chips)] += static_cast<double>(row[e]) / pairs;
        }
        const auto hot = static_cast<std::size_t>(std::max_element(load.begin(), load.end()) - load.begin());
        r.selected.push_back(std::move(selected));
        r.hot_chip.push_back(hot);
        r.hot_pairs.push_back(load[hot]);
        r.imbalance.push_back(load[hot] * static_cast<double>(r.chips));
    }
    return r;
}

}  // namespace calserve::device::sim
