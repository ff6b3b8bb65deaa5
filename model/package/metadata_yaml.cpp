// YAML metadata files (hparam.yaml, model YAML, compile_config.yaml), read with yaml-cpp.
#include <yaml-cpp/yaml.h>

#include <sstream>

#include "model/package/hashing.hpp"
#include "model/package/metadata.hpp"

namespace calserve::model::package {

namespace {

std::string flow(const std::vector<std::int64_t>& shape) {
    std::string out = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) out += ", ";
        out += std::to_string(shape[i]);
    }
    out += ']';
    return out;
}

// Wraps yaml-cpp: syntax errors become "syntax: ...", schema errors "schema: ...".
template <class Fn>
auto guarded(std::string_view what, std::string_view text, Fn&& fn) -> decltype(fn(YAML::Node{})) {
    YAML::Node root;
    try {
        root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
        return make_error(status::package_invalid, std::string(what) + ": syntax: " + e.what());
    }
    try {
        if (!root.IsMap()) return make_error(status::package_invalid, std::string(what) + ": schema: not a mapping");
        return fn(root);
    } catch (const YAML::Exception& e) {
        return make_error(status::package_invalid, std::string(what) + ": schema: " + e.what());
    }
}

template <class T>
T req(const YAML::Node& n, const char* key) {
    if (!n[key]) throw YAML::Exception(YAML::Mark::null_mark(), std::string(key) + " missing");
    return n[key].as<T>();
}

const char* yes(bool b) { return b ? "true" : "false"; }

}  // namespace

std::string write_hparam(const package& p) {
    std::ostringstream o;
    o << "# golden/smoke CSR values at the capacity limit\n";
    for (const auto& m : p.submodels) {
        const bool prefill = m.role == submodel_role::prefill;
        const std::uint32_t cur = prefill ? p.context - 1 : 1;
        const std::uint32_t total = prefill ? p.context - 1 : p.context;
        o << m.dir << ":\n  submodel: " << m.name << "\n  cur_seq_len: " << cur
          << "\n  past_kv_cur_seq_len: " << total << "\n";
    }
    return o.str();
}

result<hparam_file> parse_hparam(std::string_view text) {
    return guarded("hparam.yaml", text, [](const YAML::Node& root) -> result<hparam_file> {
        hparam_file h;
        for (const auto& section : root) {
            if (!section.second.IsMap()) continue;
            h.by_dir[section.first.as<std::string>()] = {req<std::int64_t>(section.second, "cur_seq_len"),
                                                         req<std::int64_t>(section.second, "past_kv_cur_seq_len")};
        }
        if (h.by_dir.empty()) return make_error(status::package_invalid, "hparam.yaml: schema: no submodel section");
        return h;
    });
}

std::string write_model_yaml(const preset_spec& s, const package& p) {
    std::ostringstream o;
    o << "model:\n  name: " << p.model_name << "\n  type: " << p.architecture << "\n  onnx_path: " << s.onnx_path
      << "\n  onnx_sha256: " << (s.onnx_sha256.empty() ? sha256_hex("onnx:" + s.name) : s.onnx_sha256)
      << "\n  quant: " << (s.name.starts_with("qwen3") ? "dynamic-W8A8-W4AF16" : "bf16") << "\n  vocab_size: " << p.vocab
      << "\n  num_layers: " << p.kv.layers << "\n  num_kv_heads: " << p.kv.kv_heads << "\n  head_dim: " << p.kv.head_dim
      << "\n  max_seq_len: " << p.context << "\n  batch: " << p.batch << "\ndevice:\n  chip_nums: " << p.topo.chips
      << "\n  calcore_nums: " << p.topo.calcores_per_chip << "\ncompile:\n  calcc_commit: " << s.calcc_commit
      << "\n  tvm_commit: " << s.tvm_commit
      << "\n  with_codegen: true\n  with_op_case: true\n  with_c_oplib: true\n  use_auto_alloc: true"
         "\n  enable_flash_attention: true\n  enable_one_token: true\n  has_loaded_onnx: false"
         "\n  has_optimized_graph: false\nlayout:\n  activation: "
      << p.layout.activation_layout << "\n  tile_d0: " << p.layout.tile_d0 << "\nshapes:\n";
    for (const auto& m : p.submodels) {
        o << "  " << m.dir << ":\n";
        for (const auto* list : {&m.inputs, &m.outputs})
            for (const auto& t : *list) o << "    " << t.name << ": " << flow(t.shape) << "\n";
    }
    o << "golden:\n";
    for (const auto& m : p.submodels) {
        o << "  " << m.dir << ":\n    input_sha256: " << sha256_hex("golden-in:" + s.name + ":" + m.dir)
          << "\n    output_sha256: " << sha256_hex("golden-out:" + s.name + ":" + m.dir) << "\n";
    }
    return o.str();
}

namespace {
void read_model_section(const YAML::Node& m, model_yaml& y) {
    y.name = req<std::string>(m, "name");
    y.type = req<std::string>(m, "type");
    y.onnx_path = m["onnx_path"] ? m["onnx_path"].as<std::string>() : "";
    y.onnx_sha256 = m["onnx_sha256"] ? m["onnx_sha256"].as<std::string>() : "";
    y.quant = m["quant"] ? m["quant"].as<std::string>() : "";
    y.vocab = req<std::int64_t>(m, "vocab_size");
    y.layers = req<std::int64_t>(m, "num_layers");
    y.kv_heads = req<std::int64_t>(m, "num_kv_heads");
    y.head_dim = req<std::int64_t>(m, "head_dim");
    y.max_seq_len = req<std::int64_t>(m, "max_seq_len");
    y.batch = req<std::int64_t>(m, "batch");
}
}  // namespace

result<model_yaml> parse_model_yaml(std::string_view text) {
    return guarded("model yaml", text, [](const YAML::Node& root) -> result<model_yaml> {
        model_yaml y;
        read_model_section(req<YAML::Node>(root, "model"), y);
        const auto dev = req<YAML::Node>(root, "device");
        y.chip_nums = req<std::int64_t>(dev, "chip_nums");
        y.calcore_nums = req<std::int64_t>(dev, "calcore_nums");
        if (const auto c = root["compile"]) {
            for (const auto& kv : c) {
                const auto key = kv.first.as<std::string>();
                if (key == "calcc_commit") y.calcc_commit = kv.second.as<std::string>();
                else if (key == "tvm_commit") y.tvm_commit = kv.second.as<std::string>();
                else y.compile_flags[key] = kv.second.as<bool>();
            }
        }
        if (const auto l = root["layout"]) {
            y.layout = l["activation"] ? l["activation"].as<std::string>() : "";
            y.tile_d0 = l["tile_d0"] ? l["tile_d0"].as<std::int64_t>() : 0;
        }
        if (const auto sh = root["shapes"])
            for (const auto& prof : sh)
                for (const auto& t : prof.second)
                    y.shapes[prof.first.as<std::string>()][t.first.as<std::string>()] =
                        t.second.as<std::vector<std::int64_t>>();
        if (const auto g = root["golden"])
            for (const auto& prof : g)
                for (const auto& h : prof.second)
                    y.golden[prof.first.as<std::string>() + "." + h.first.as<std::string>()] = h.second.as<std::string>();
        return y;
    });
}

std::string write_compile_config(const package& p, const submodel& m) {
    std::ostringstream o;
    const bool prefill = m.role == submodel_role::prefill;
    o << "profile: " << to_string(m.role) << "_b" << m.batch << "_s" << p.context << "\nbatch: " << m.batch
      << "\nmax_seq: " << p.context << "\nis_prefill: " << yes(prefill) << "\ndynamic_d2d: " << yes(m.dynamic_d2d)
      << "\n";
    return o.str();
}

result<compile_config> parse_compile_config(std::string_view text) {
    return guarded("compile_config.yaml", text, [](const YAML::Node& root) -> result<compile_config> {
        compile_config c;
        c.profile = req<std::string>(root, "profile");
        c.batch = req<std::int64_t>(root, "batch");
        c.max_seq = req<std::int64_t>(root, "max_seq");
        c.is_prefill = req<bool>(root, "is_prefill");
        c.dynamic_d2d = req<bool>(root, "dynamic_d2d");
        return c;
    });
}

}  // namespace calserve::model::package
