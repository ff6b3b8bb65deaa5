// `calserve plan --placement` (see plan_placement.hpp).
#include "tools/plan_placement.hpp"
#include "config/json_text.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "device/package_spec.hpp"
#include "device/sim/placement_plan.hpp"

namespace calserve::tools {
namespace plan_placement_impl {
namespace {
namespace json = boost::json;
namespace sim = calserve::device::sim;

json::object to_json(const sim::placement_row& r) {
    json::object steps;
    for (std::size_t i = 0; i < sim::k_plan_batches.size(); ++i)
        steps[std::to_string(sim::k_plan_batches[i])] = r.decode_step_ms[i];
    json::array chips;
    for (const auto& c : r.chips)
        chips.push_back(json::object{{"params", c.params}, {"kv", c.kv}, {"workspace", c.workspace},
                                     {"buffers", c.buffers}, {"guard", c.guard}, {"total", c.total},
                                     {"usable", c.usable}, {"fits", c.fits}});
    json::object o{{"placement", r.placement},
                   {"fits", r.fits},
                   {"chips", std::move(chips)},
                   {"max_batch_at_context", r.max_batch_at_context},
                   {"max_context_batch1", r.max_context_batch1},
                   {"link_bytes_per_token", r.link_bytes_per_token},
                   {"prefill_ms", r.prefill_ms},
                   {"decode_step_ms", std::move(steps)},
                   {"fault_domain", r.fault_domain}};
    if (r.placement == "ep") {
        o["routing"] = r.routing_counts ? "counts" : "skew";
        if (!r.routing_counts) o["routing_skew"] = r.routing_skew;
        o["imbalance"] = r.imbalance;
        if (r.routing_counts) {
            json::array layers;
            for (double x : r.layer_imbalance) layers.emplace_back(x);
            o["layer_imbalance"] = std::move(layers);
        }
    }
    return o;
}

std::string gib(std::uint64_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(b) / (1ull << 30));
    return buf;
}

void print_row(const sim::placement_row& r) {
    std::string label = r.placement;
    if (r.placement == "ep") {
        char buf[64];
        std::snprintf(buf, sizeof buf, "ep skew %.1f", r.routing_skew);
        label = r.routing_counts ? "ep counts" : buf;
    }
    std::printf("%-12s", label.c_str());
    for (const auto& c : r.chips) std::printf(" %s+%s", gib(c.params).c_str(), gib(c.total - c.params).c_str());
    std::printf("  %-4s %5u %8llu %9.0f", r.fits ? "yes" : "NO", r.max_batch_at_context,
                static_cast<unsigned long long>(r.max_context_batch1), r.link_bytes_per_token);
    std::printf(" %6.2f", r.imbalance);
    std::printf(" %9.1f ", r.prefill_ms);
    for (double ms : r.decode_step_ms) std::printf(" %6.2f", ms);
    std::printf("\n");
}

// The ep row's per-layer imbalance, ten layers a line.
void print_layers(const sim::placement_row& r, const std::string& file) {
    const auto [lo, hi] = std::minmax_element(r.layer_imbalance.begin(), r.layer_imbalance.end());
    std::printf("ep routing counts %s: hot-expert imbalance (hottest chip / mean chip) per layer, "
                "min %.3f mean %.3f max %.3f\n", file.c_str(), *lo, r.imbalance, *hi);
    for (std::size_t l = 0; l < r.layer_imbalance.size(); ++l)
        std::printf("%s L%zu %.3f%s", l % 10 == 0 ? " " : "", l, r.layer_imbalance[l],
                    l % 10 == 9 || l + 1 == r.layer_imbalance.size() ? "\n" : "");
}

// The counts of `file`, checked against the package; nullptr with a message when they are not usable.
std::shared_ptr<const model::routing_counts> load_routing(const std::string& file, const device::package_spec& spec) {
    std::ifstream in(file);
    if (!in) {
        std::cerr << "plan: cannot read routing counts " << file << "\n";
        return nullptr;
    }
    std::stringstream text;
    text << in.rdbuf();
    auto counts = model::parse_routing_counts(text.str());
    if (!counts) {
        std::cerr << "plan: " << file << ": " << counts.error().what() << "\n";
        return nullptr;
    }
    if (auto ok = sim::check_routing(spec, *counts); !ok) {
        std::cerr << "plan: " << file << ": " << ok.error().what() << "\n";
        return nullptr;
    }
    return std::make_shared<const model::routing_counts>(std::move(*counts));
}

}  // namespace
}  // namespace plan_placement_impl

int run_plan_placement(const model::package::package& p, const config& cfg, const model::package::capacity_limits& l,
                       model::package::kv_dtype_choice kv, std::uint32_t context, const placement_cli& o, bool json_out) {
    using namespace plan_placement_impl;
    namespace json = boost::json;
    namespace sim = calserve::device::sim;
    auto spec = device::package_spec_from(p);
    if (!spec) {
        std::cerr << "plan: " << spec.error().message << "\n";
        return 2;
    }
    const auto constants = sim::latency_constants::from_config(cfg);
    sim::placement_query q;
    q.context = context;
    q.past = o.past;
    q.prompt_tokens = o.prompt_tokens;
    q.kv = kv;
    q.limits = l;
    std::shared_ptr<const model::routing_counts> routing;
    if (!o.routing.empty() && !(routing = load_routing(o.routing, *spec))) return 2;
    std::vector<sim::placement_row> rows;
    auto want = [&](std::string_view name) { return o.placement == "all" || o.placement == name; };
    if (want("tp")) rows.push_back(sim::plan_placement(p, *spec, constants, sim::parallel_kind::tp, q));
    if (want("ep") && routing) {
        auto c = constants;
        c.routing = routing;
        rows.push_back(sim::plan_placement(p, *spec, c, sim::parallel_kind::ep, q));
    }
    if (want("ep") && (!routing || o.skews_given))
        for (double skew : o.skews) {
            auto c = constants;
            c.routing_skew = skew;
            rows.push_back(sim::plan_placement(p, *spec, c, sim::parallel_kind::ep, q));
        }
    if (want("pp")) rows.push_back(sim::plan_placement(p, *spec, constants, sim::parallel_kind::pp, q));
    if (o.placement == "all") rows.push_back(sim::plan_replica(p, *spec, constants, q));
    if (json_out) {
        json::array all;
        for (const auto& r : rows) all.push_back(to_json(r));
        // One placement (one row): its object; several: {"placements": [...]}.
        if (all.size() == 1) std::cout << json_text(all.front()) << "\n";
        else
            std::cout << json_text(json::object{{"package", p.root.string()}, {"package_placement", p.placement},
                                                {"placements", std::move(all)}})
                      << "\n";
        return 0;
    }
    std::printf("package %s: %u chips, packed as %s, context %u, decode rows at %lld tokens, prefill of %lld tokens\n",
                p.model_name.c_str(), p.topo.chips, p.placement.c_str(), context ? context : p.context, static_cast<long long>(o.past),
                static_cast<long long>(o.prompt_tokens));
    std::printf("%-12s %-*s  %-4s %5s %8s %9s %6s %9s  decode step ms at batch 1 2 4 8 16\n", "placement",
                int(p.topo.chips * 10), "GiB per chip (params+rest)", "fits", "B@ctx", "ctx@B1", "link B/tok", "imbal",
                "prefill ms");
    for (const auto& r : rows) print_row(r);
    for (const auto& r : rows)
        if (r.routing_counts) print_layers(r, o.routing);
    std::printf("fault domains:\n");
    std::string seen;
    for (const auto& r : rows) {
        if (seen.find(" " + r.placement + " ") != std::string::npos) continue;
        seen += " " + r.placement + " ";
        std::printf("  %-8s %s\n", r.placement.c_str(), r.fault_domain.c_str());
    }
    std::printf("(modelled figures: latency model constants as `calserve inspect` prints them; docs/twin.md)\n");
    return 0;
}

}  // namespace calserve::tools
