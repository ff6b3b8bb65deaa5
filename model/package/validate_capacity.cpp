// Gates E (capacity per chip) and F (reproducibility metadata).
#include <algorithm>

#include "model/package/validate_internal.hpp"

namespace calserve::model::package {

namespace {

bool is_hex(const std::string& s, std::size_t len) {
    return s.size() == len && std::all_of(s.begin(), s.end(), [](char ch) {
               return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f');
           });
}

std::string gib(std::uint64_t b) { return std::to_string(static_cast<double>(b) / (1ull << 30)) + " GiB"; }

}  // namespace

void gate_capacity(validation_context& c) {
    const auto& p = c.pkg;
    const auto need = kv_bytes_per_chip(p, p.kv.batch, p.context, package_kv_choice(p));
    if (p.context > p.kv.context || p.kv.bytes_per_chip < need)
        c.add("E_CONTEXT_BEYOND_KV", severity::error, 'E', "calserve-manifest.json",
              "context " + std::to_string(p.context) + " needs " + std::to_string(need) + " B of KV per chip, layout holds " +
                  std::to_string(p.kv.bytes_per_chip) + " B (" + std::to_string(p.kv.context) + " tokens)");
    for (const auto* m : p.decode_profiles()) {  // every profile's rows address the one KV region
        auto it = c.report->figures.unions.find(m->dir);
        if (it != c.report->figures.unions.end() && it->second.largest_activation_interval != p.kv.bytes_per_chip)
            c.add("E_KV_INTERVAL_MISMATCH", severity::error, 'E', op_map_name(p, *m),
                  "largest decode activation interval " + std::to_string(it->second.largest_activation_interval) +
                      " B != KV per chip " + std::to_string(p.kv.bytes_per_chip) + " B");
    }
    const auto& l = c.opt.limits;
    if (p.reserved.dram_bytes > l.dram_bytes_per_chip || p.reserved.sram_bytes > l.sram_bytes_per_chip)
        c.add("E_RESERVATION_EXCEEDS_DEVICE", severity::error, 'E', "model_memory_reserved_info.txt",
              "reservation DRAM " + gib(p.reserved.dram_bytes) + " / SRAM " + std::to_string(p.reserved.sram_bytes) +
                  " B exceeds the device (" + gib(l.dram_bytes_per_chip) + " / " + std::to_string(l.sram_bytes_per_chip) + " B)");
    for (const auto& ch : p.chips)
        if (ch.param_dram_bytes + p.kv.bytes_per_chip > p.reserved.dram_bytes)
            c.add("E_PARAMS_EXCEED_RESERVATION", severity::error, 'E', ch.param_file,
                  "parameters + KV exceed the DRAM reservation of chip " + std::to_string(ch.index));
    // The KV region the package holds (kv.batch sequences of kv.context tokens) must fit; decode
    // profiles share it, so a batch-B step at a shorter context needs no more.
    auto plan = plan_capacity(p, p.kv.batch, p.kv.context, package_kv_choice(p), l);
    for (const auto& b : plan.chips)
        if (!b.fits)
            c.add("E_CAPACITY_EXCEEDED", severity::error, 'E', "",
                  "chip " + std::to_string(b.chip) + " needs " + gib(b.total) + " of " + gib(b.usable) + " usable");
    c.report->capacity.push_back(std::move(plan));
}

void gate_reproducibility(validation_context& c) {
    const auto yaml = model_yaml_name(c.pkg);
    if (!c.yaml) {
        c.add("F_BLOCKED_REPRODUCIBILITY", severity::error, 'F', yaml, "model YAML unreadable: no compiler provenance");
        return;
    }
    std::vector<std::string> missing;
    if (!is_hex(c.yaml->calcc_commit, 40)) missing.push_back("calcc_commit");
    if (!is_hex(c.yaml->tvm_commit, 40)) missing.push_back("tvm_commit");
    if (!is_hex(c.yaml->onnx_sha256, 64)) missing.push_back("onnx_sha256");
    for (const auto& m : c.pkg.submodels)
        for (const char* io : {"input_sha256", "output_sha256"}) {
            const auto key = m.dir + "." + io;
            auto g = c.yaml->golden.find(key);
            if (g == c.yaml->golden.end() || !is_hex(g->second, 64)) missing.push_back("golden." + key);
        }
    if (!missing.empty()) {
        std::string list;
        for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
        c.add("F_BLOCKED_REPRODUCIBILITY", severity::error, 'F', yaml, "missing or malformed: " + list);
    }
    if (c.version) {
        auto v = *c.version;
        if (v["CALCC_COMMIT"] != c.yaml->calcc_commit || v["TVM_COMMIT"] != c.yaml->tvm_commit)
            c.add("F_COMMIT_MISMATCH", severity::error, 'F', "version.py", "compiler commits differ from " + yaml);
    }
}

}  // namespace calserve::model::package
