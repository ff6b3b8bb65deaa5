// Document 000's file layout as a function of the package topology.
#include "model/package/layout.hpp"

namespace calserve::model::package {

std::string_view to_string(file_kind k) {
    switch (k) {
        case file_kind::param_block: return "param_block";
        case file_kind::model_reservation: return "model_reservation";
        case file_kind::hparam: return "hparam";
        case file_kind::model_yaml: return "model_yaml";
        case file_kind::op_map: return "op_map";
        case file_kind::profparts: return "profparts";
        case file_kind::version_py: return "version_py";
        case file_kind::tokenizer: return "tokenizer";
        case file_kind::submodel_reservation: return "submodel_reservation";
        case file_kind::compile_config: return "compile_config";
        case file_kind::cmd_binary: return "cmd_binary";
        case file_kind::cmd_text: return "cmd_text";
        case file_kind::ccu_elf: return "ccu_elf";
        case file_kind::cpu_helper: return "cpu_helper";
    }
    return "?";
}

std::string model_yaml_name(const package& p) {
    return p.model_name + "_" + std::to_string(p.topo.chips) + "_chips_" + std::to_string(p.context) + "_fa.yaml";
}
std::string op_map_name(const package& p, const submodel& m) { return p.model_name + "_" + m.dir + "_op_io_buf_ptr.yaml"; }
std::string profparts_name(const package& p, const submodel& m, std::uint32_t chip) {
    return p.model_name + "_" + m.dir + "_chip" + std::to_string(chip) + ".profparts";
}
std::vector<std::string> tokenizer_files(const package& p) {
    const std::string d = "__Tokenizer/";
    return {d + "tokenizer.json",         d + "tokenizer_config.json",   d + "vocab.json",
            d + "merges.txt",             d + "config.json",             d + "generation_config.json",
            d + "special_tokens_map.json", d + "added_tokens.json",      d + p.model_name + ".vocab.gguf"};
}

namespace {
void add_submodel_files(std::vector<layout_entry>& out, const package& p, const submodel& m) {
    const std::string d = m.dir + "/";
    out.push_back({d + "submodel_memory_reserved_info.txt", file_kind::submodel_reservation, &m, 0, "", ""});
    out.push_back({d + "compile_config.yaml", file_kind::compile_config, &m, 0, "", ""});
    for (std::uint32_t c = 0; c < p.topo.chips; ++c) {
        const std::string chip = "chip" + std::to_string(c);
        for (const char* engine : {"cpu", "pld_cpu"})
            for (const char* slot : {"ping", "pong"}) {
                const std::string e(engine), s(slot);
                out.push_back({d + e + "_" + chip + "_" + s + ".bin", file_kind::cmd_binary, &m, c, e, s});
                out.push_back({d + e + "_" + chip + "_runtime_cmds_" + s + ".txt", file_kind::cmd_text, &m, c, e, s});
            }
        for (std::uint32_t ccu = 0; ccu < p.topo.calcores_per_chip; ++ccu)
            out.push_back({d + "ccu" + std::to_string(ccu) + "_" + chip + ".elf", file_kind::ccu_elf, &m, c, "", ""});
    }
    if (m.dynamic_d2d) {
        out.push_back({d + "libcpu_x86.so", file_kind::cpu_helper, &m, 0, "x86", ""});
        out.push_back({d + "libcpu_riscv.so", file_kind::cpu_helper, &m, 0, "riscv", ""});
    }
}
}  // namespace

std::vector<layout_entry> expected_layout(const package& p) {
    std::vector<layout_entry> out;
    for (std::uint32_t c = 0; c < p.params.size(); ++c)
        out.push_back({p.params[c].file, file_kind::param_block, nullptr, c, "", ""});
    out.push_back({"model_memory_reserved_info.txt", file_kind::model_reservation, nullptr, 0, "", ""});
    out.push_back({"hparam.yaml", file_kind::hparam, nullptr, 0, "", ""});
    out.push_back({model_yaml_name(p), file_kind::model_yaml, nullptr, 0, "", ""});
    for (const auto& m : p.submodels) {
        out.push_back({op_map_name(p, m), file_kind::op_map, &m, 0, "", ""});
        for (std::uint32_t c = 0; c < p.topo.chips; ++c)
            out.push_back({profparts_name(p, m, c), file_kind::profparts, &m, c, "", ""});
    }
    out.push_back({"version.py", file_kind::version_py, nullptr, 0, "", ""});
    for (auto& f : tokenizer_files(p)) out.push_back({f, file_kind::tokenizer, nullptr, 0, "", ""});
    for (const auto& m : p.submodels) add_submodel_files(out, p, m);
    return out;
}

}  // namespace calserve::model::package
