// Figures derived from the parsed files: address-interval unions, KV interval,
// D2D histograms, op-family counts and profparts line counts.
#include <algorithm>

#include "model/package/validate_internal.hpp"

namespace calserve::model::package {

namespace {

using interval = std::pair<std::uint64_t, std::uint64_t>;  // [begin, end)

std::vector<interval> merge(std::vector<interval> v) {
    std::sort(v.begin(), v.end());
    std::vector<interval> out;
    for (const auto& iv : v) {
        if (iv.second <= iv.first) continue;
        if (!out.empty() && iv.first <= out.back().second) out.back().second = std::max(out.back().second, iv.second);
        else out.push_back(iv);
    }
    return out;
}

std::uint64_t covered(const std::vector<interval>& merged) {
    std::uint64_t n = 0;
    for (const auto& iv : merged) n += iv.second - iv.first;
    return n;
}

union_figures unions_of(const op_map& m) {
    std::vector<interval> by_kind[3], all;
    for (const auto& op : m.ops)
        for (const auto* list : {&op.inputs, &op.outputs})
            for (const auto& t : *list) {
                const interval iv{t.addr, t.addr + t.size};
                by_kind[static_cast<int>(t.kind)].push_back(iv);
                all.push_back(iv);
            }
    union_figures f;
    f.input = covered(merge(by_kind[static_cast<int>(tensor_kind::input)]));
    f.constant = covered(merge(by_kind[static_cast<int>(tensor_kind::constant)]));
    const auto act = merge(by_kind[static_cast<int>(tensor_kind::activation)]);
    f.activation = covered(act);
    f.total = covered(merge(std::move(all)));
    for (const auto& iv : act)
        if (iv.second - iv.first > f.largest_activation_interval) {
            f.largest_activation_interval = iv.second - iv.first;
            f.largest_activation_start = iv.first;
        }
    return f;
}

}  // namespace

void compute_figures(validation_context& c) {
    auto& f = c.report->figures;
    f.kv_bytes_total = c.pkg.kv.bytes_total;
    f.kv_bytes_per_chip = c.pkg.kv.bytes_per_chip;
    for (const auto& s : c.subs) {
        const std::string& dir = s.manifest->dir;
        if (s.ops) f.unions[dir] = unions_of(*s.ops);
        auto& fams = f.op_families[dir];
        auto& lines = f.profparts_lines[dir];
        for (const auto& pp : s.profparts) {
            fams.push_back(pp ? family_counts(*pp) : std::map<std::string, std::uint64_t>{});
            lines.push_back(pp ? pp->size() : 0);
        }
        if (s.manifest->role != submodel_role::prefill) continue;
        for (std::uint32_t chip = 0; chip < c.pkg.topo.chips; ++chip) {
            const auto path = s.manifest->dir + "/pld_cpu_chip" + std::to_string(chip) + "_runtime_cmds_ping.txt";
            auto it = s.text_cmds.find(path);
            f.prefill_d2d.push_back(it == s.text_cmds.end() ? d2d_stats{} : d2d_histogram(it->second));
        }
    }
}

}  // namespace calserve::model::package
