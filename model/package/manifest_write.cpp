// calserve-manifest.json writer and the package invariants shared by reader and writer.
#include <boost/json.hpp>

#include "model/package/json_read.hpp"
#include "model/package/manifest.hpp"

namespace calserve::model::package {

namespace json = boost::json;

namespace {

json::object tensor_json(const tensor_spec& t) {
    json::array shape;
    for (auto d : t.shape) shape.emplace_back(d);
    return json::object{{"name", t.name},           {"port", t.port},
                        {"shape", std::move(shape)}, {"dtype", to_string(t.type)},
                        {"bytes", t.byte_size},      {"ping", to_hex(t.ping_addr)},
                        {"pong", to_hex(t.pong_addr)}, {"chip", t.chip}};
}

json::object submodel_json(const submodel& s) {
    json::array inputs, outputs, csrs;
    for (const auto& t : s.inputs) inputs.push_back(tensor_json(t));
    for (const auto& t : s.outputs) outputs.push_back(tensor_json(t));
    for (const auto& c : s.csrs)
        csrs.push_back(json::object{{"name", c.name}, {"offset", to_hex(c.offset)}, {"dtype", to_string(c.type)}});
    return json::object{{"name", s.name},
                        {"dir", s.dir},
                        {"role", to_string(s.role)},
                        {"type_label", s.type_label},
                        {"batch", s.batch},
                        {"max_tokens", s.max_tokens},
                        {"dynamic_d2d", s.dynamic_d2d},
                        {"workspace_bytes_per_chip", s.workspace_bytes_per_chip},
                        {"command_bytes_per_chip", s.command_bytes_per_chip},
                        {"inputs", std::move(inputs)},
                        {"outputs", std::move(outputs)},
                        {"csrs", std::move(csrs)}};
}

json::array chips_json(const package& p) {
    json::array chips;
    for (std::size_t i = 0; i < p.chips.size(); ++i) {
        const auto& c = p.chips[i];
        std::uint32_t mask = i < p.params.size() ? p.params[i].chip_mask : (1u << c.index);
        chips.push_back(json::object{{"index", c.index},
                                     {"calcores", c.calcores},
                                     {"param_file", c.param_file},
                                     {"chip_mask", to_hex(mask)},
                                     {"param_bytes", c.param_bytes},
                                     {"dram_bytes", c.param_dram_bytes},
                                     {"sram_bytes", c.param_sram_bytes}});
    }
    return chips;
}

json::array hashes_json(const package& p) {
    json::array out;
    for (const auto& h : p.hashes) {
        json::object o{{"file", h.file}, {"size", h.size}};
        if (!h.sha256.empty()) o["sha256"] = h.sha256;
        if (!h.sparse_digest.empty()) o["sparse_digest"] = h.sparse_digest;
        out.push_back(std::move(o));
    }
    return out;
}

// Pretty printer: one key per line keeps manifests diffable.
void pretty(std::string& out, const json::value& v, int indent) {
    const std::string pad(static_cast<std::size_t>(indent) * 2, ' ');
    if (const auto* o = v.if_object(); o && !o->empty()) {
        out += "{\n";
        std::size_t i = 0;
        for (const auto& kv : *o) {
            out += pad + "  " + json::serialize(json::value(kv.key())) + ": ";
            pretty(out, kv.value(), indent + 1);
            out += (++i < o->size()) ? ",\n" : "\n";
        }
        out += pad + "}";
    } else if (const auto* a = v.if_array(); a && !a->empty() && !(*a)[0].is_number()) {
        out += "[\n";
        for (std::size_t i = 0; i < a->size(); ++i) {
            out += pad + "  ";
            pretty(out, (*a)[i], indent + 1);
            out += (i + 1 < a->size()) ? ",\n" : "\n";
        }
        out += pad + "]";
    } else {
        out += json::serialize(v);
    }
}

}  // namespace

std::string write_manifest_json(const package& p) {
    json::array subs;
    for (const auto& s : p.submodels) subs.push_back(submodel_json(s));
    json::object doc{
        {"schema", p.schema},
        {"kind", "calserve-manifest"},
        {"model", json::object{{"name", p.model_name}, {"architecture", p.architecture}, {"preset", p.preset}}},
        {"context", p.context},
        {"batch", p.batch},
        {"vocab", p.vocab},
        {"layout", json::object{{"activation_layout", p.layout.activation_layout}, {"tile_d0", p.layout.tile_d0}}},
        {"kv", json::object{{"layers", p.kv.layers},
                            {"kv_heads", p.kv.kv_heads},
                            {"head_dim", p.kv.head_dim},
                            {"k_dtype", to_string(p.kv.k_dtype)},
                            {"v_dtype", to_string(p.kv.v_dtype)},
                            {"context", p.kv.context},
                            {"batch", p.kv.batch},
                            {"bytes_total", p.kv.bytes_total},
                            {"bytes_per_chip", p.kv.bytes_per_chip}}},
        {"topology", json::object{{"chips", p.topo.chips},
                                  {"calcores_per_chip", p.topo.calcores_per_chip},
                                  {"tensor_parallel", p.topo.tensor_parallel}}},
        {"chips", chips_json(p)},
        {"reservation", json::object{{"dram_base", to_hex(p.reserved.dram_base)},
                                     {"dram_bytes", p.reserved.dram_bytes},
                                     {"sram_base", to_hex(p.reserved.sram_base)},
                                     {"sram_bytes", p.reserved.sram_bytes},
                                     {"sync_base", to_hex(p.reserved.sync_base)},
                                     {"sync_bytes", p.reserved.sync_bytes}}},
        {"submodels", std::move(subs)},
        {"runtime", json::object{{"name", p.runtime_name}, {"version", p.runtime_version}}},
        {"hashes", hashes_json(p)},
        {"reference_model_dir", p.reference_model_dir.empty() ? std::string() : p.reference_model_dir.filename().string()},
    };
    // S8 V packages name their scale dtype; BF16 packages keep the manifest they always had.
    if (p.kv.v_dtype == dtype::int8) doc["kv"].as_object()["v_scale_dtype"] = to_string(p.kv.v_scale_dtype);
    // Likewise: only packages whose decode programs end in a sampling head say so.
    if (p.sampling_head_k > 0) doc["sampling_head"] = json::object{{"top_k", p.sampling_head_k}};
    // And only packages laid out other than tensor-parallel name their placement.
    if (p.placement != k_placement_tp) doc["placement"] = p.placement;
    std::string out;
    pretty(out, doc, 0);
    out += "\n";
    return out;
}

namespace {
void_result check_tensor(const tensor_spec& t, const std::string& where) {
    auto bad = [&](const std::string& m) { return make_error(status::package_invalid, where + " " + t.name + ": " + m); };
    if (t.name.empty()) return bad("empty tensor name");
    if (t.shape.empty()) return bad("empty shape");
    if (t.byte_size != t.element_count() * dtype_bytes(t.type)) return bad("byte size does not match shape x dtype");
    if (t.ping_addr == t.pong_addr) return bad("ping and pong share one address");
    return {};
}
}  // namespace

void_result check_package_invariants(const package& p) {
    auto bad = [](const std::string& m) { return make_error(status::package_invalid, m); };
    for (std::size_t i = 0; i < p.submodels.size(); ++i) {
        const auto& s = p.submodels[i];
        if (s.name.empty()) return bad("submodel with an empty name");
        for (std::size_t j = 0; j < p.submodels.size(); ++j)
            if (i != j && p.submodels[j].name.find(s.name) != std::string::npos)
                return bad("submodel name '" + s.name + "' is a substring of '" + p.submodels[j].name + "'");
        for (const auto& t : s.inputs)
            if (auto r = check_tensor(t, s.name + " input"); !r) return r;
        for (const auto& t : s.outputs)
            if (auto r = check_tensor(t, s.name + " output"); !r) return r;
    }
    if (p.chips.size() != p.topo.chips || p.params.size() != p.topo.chips)
        return bad("chips list does not match topology.chips");
    for (const auto& c : p.chips)
        if (c.param_bytes != c.param_dram_bytes + c.param_sram_bytes)
            return bad("chip " + std::to_string(c.index) + ": param bytes != dram + sram");
    if (p.topo.tensor_parallel == 0 || p.kv.bytes_per_chip * p.topo.tensor_parallel != p.kv.bytes_total)
        return bad("kv.bytes_per_chip x tensor_parallel != kv.bytes_total");
    return {};
}

}  // namespace calserve::model::package
