// calserve-manifest.json reader and writer (schema 1).
#include "model/package/manifest.hpp"

#include <boost/json.hpp>

#include "model/package/json_read.hpp"

namespace calserve::model::package {

namespace json = boost::json;

namespace {

std::optional<dtype> read_dtype(json_reader& r, const json::object& o, std::string_view key, std::string_view path) {
    auto s = r.string(o, key, path);
    if (!s) return std::nullopt;
    auto t = parse_dtype(*s);
    if (!t) r.fail(std::string(path) + "." + std::string(key) + ": unknown dtype '" + *s + "'");
    return t;
}

tensor_spec read_tensor(json_reader& r, const json::value& v, const std::string& path) {
    tensor_spec t;
    const auto* o = r.object(v, path);
    if (!o) return t;
    t.name = r.string(*o, "name", path).value_or("");
    t.port = r.string(*o, "port", path).value_or("");
    if (const auto* shape = r.array(*o, "shape", path)) {
        for (std::size_t i = 0; i < shape->size(); ++i) {
            auto d = r.i64((*shape)[i], path + ".shape[" + std::to_string(i) + "]");
            if (d && *d <= 0) r.fail(path + ".shape: dimensions must be positive");
            t.shape.push_back(d.value_or(0));
        }
    }
    t.type = read_dtype(r, *o, "dtype", path).value_or(dtype::int32);
    t.byte_size = r.u64(*o, "bytes", path).value_or(0);
    t.ping_addr = r.address(*o, "ping", path).value_or(0);
    t.pong_addr = r.address(*o, "pong", path).value_or(0);
    if (o->contains("chip")) t.chip = static_cast<std::uint32_t>(r.u64(*o, "chip", path).value_or(0));
    return t;
}

std::vector<tensor_spec> read_tensors(json_reader& r, const json::object& o, std::string_view key, const std::string& path) {
    std::vector<tensor_spec> out;
    if (const auto* a = r.array(o, key, path))
        for (std::size_t i = 0; i < a->size(); ++i)
            out.push_back(read_tensor(r, (*a)[i], path + "." + std::string(key) + "[" + std::to_string(i) + "]"));
    return out;
}

submodel read_submodel(json_reader& r, const json::value& v, const std::string& path) {
    submodel s;
    const auto* o = r.object(v, path);
    if (!o) return s;
    s.name = r.string(*o, "name", path).value_or("");
    s.dir = r.string(*o, "dir", path).value_or("");
    auto role = r.string(*o, "role", path).value_or("");
    if (role == "prefill") s.role = submodel_role::prefill;
    else if (role == "decode") s.role = submodel_role::decode;
    else r.fail(path + ".role: expected prefill or decode, got '" + role + "'");
    s.type_label = r.string(*o, "type_label", path).value_or("");
    s.batch = static_cast<std::uint32_t>(r.u64(*o, "batch", path).value_or(0));
    s.max_tokens = static_cast<std::uint32_t>(r.u64(*o, "max_tokens", path).value_or(0));
    s.dynamic_d2d = r.boolean(*o, "dynamic_d2d", path).value_or(false);
    s.workspace_bytes_per_chip = r.u64(*o, "workspace_bytes_per_chip", path).value_or(0);
    s.command_bytes_per_chip = r.u64(*o, "command_bytes_per_chip", path).value_or(0);
    s.inputs = read_tensors(r, *o, "inputs", path);
    s.outputs = read_tensors(r, *o, "outputs", path);
    if (const auto* a = r.array(*o, "csrs", path)) {
        for (std::size_t i = 0; i < a->size(); ++i) {
            auto cpath = path + ".csrs[" + std::to_string(i) + "]";
            const auto* c = r.object((*a)[i], cpath);
            if (!c) continue;
            csr_spec csr;
            csr.name = r.string(*c, "name", cpath).value_or("");
            csr.offset = static_cast<std::uint32_t>(r.address(*c, "offset", cpath).value_or(0));
            csr.type = read_dtype(r, *c, "dtype", cpath).value_or(dtype::uint32);
            s.csrs.push_back(std::move(csr));
        }
    }
    return s;
}

void read_kv(json_reader& r, const json::object& o, kv_layout& kv) {
    const auto* k = r.object(o, "kv", "$");
    if (!k) return;
    kv.layers = static_cast<std::uint32_t>(r.u64(*k, "layers", "$.kv").value_or(0));
    kv.kv_heads = static_cast<std::uint32_t>(r.u64(*k, "kv_heads", "$.kv").value_or(0));
    kv.head_dim = static_cast<std::uint32_t>(r.u64(*k, "head_dim", "$.kv").value_or(0));
    kv.k_dtype = read_dtype(r, *k, "k_dtype", "$.kv").value_or(dtype::bf16);
    kv.v_dtype = read_dtype(r, *k, "v_dtype", "$.kv").value_or(dtype::bf16);
    if (k->contains("v_scale_dtype")) kv.v_scale_dtype = read_dtype(r, *k, "v_scale_dtype", "$.kv").value_or(dtype::fp32);
    kv.context = static_cast<std::uint32_t>(r.u64(*k, "context", "$.kv").value_or(0));
    kv.batch = static_cast<std::uint32_t>(r.u64(*k, "batch", "$.kv").value_or(0));
    kv.bytes_total = r.u64(*k, "bytes_total", "$.kv").value_or(0);
    kv.bytes_per_chip = r.u64(*k, "bytes_per_chip", "$.kv").value_or(0);
}

void read_topology(json_reader& r, const json::object& o, package& p) {
    if (const auto* t = r.object(o, "topology", "$")) {
        p.topo.chips = static_cast<std::uint32_t>(r.u64(*t, "chips", "$.topology").value_or(0));
        p.topo.calcores_per_chip = static_cast<std::uint32_t>(r.u64(*t, "calcores_per_chip", "$.topology").value_or(0));
        p.topo.tensor_parallel = static_cast<std::uint32_t>(r.u64(*t, "tensor_parallel", "$.topology").value_or(0));
    }
    const auto* a = r.array(o, "chips", "$");
    if (!a) return;
    for (std::size_t i = 0; i < a->size(); ++i) {
        auto path = "$.chips[" + std::to_string(i) + "]";
        const auto* c = r.object((*a)[i], path);
        if (!c) continue;
        chip_info chip;
        chip.index = static_cast<std::uint32_t>(r.u64(*c, "index", path).value_or(0));
        chip.calcores = static_cast<std::uint32_t>(r.u64(*c, "calcores", path).value_or(0));
        chip.param_file = r.string(*c, "param_file", path).value_or("");
        chip.param_bytes = r.u64(*c, "param_bytes", path).value_or(0);
        chip.param_dram_bytes = r.u64(*c, "dram_bytes", path).value_or(0);
        chip.param_sram_bytes = r.u64(*c, "sram_bytes", path).value_or(0);
        param_file f;
        f.file = chip.param_file;
        f.chip_mask = static_cast<std::uint32_t>(r.address(*c, "chip_mask", path).value_or(0));
        f.size_bytes = chip.param_bytes;
        f.dram_bytes = chip.param_dram_bytes;
        f.sram_bytes = chip.param_sram_bytes;
        p.chips.push_back(std::move(chip));
        p.params.push_back(std::move(f));
    }
}

void read_reservation(json_reader& r, const json::object& o, reservation& res) {
    const auto* v = r.object(o, "reservation", "$");
    if (!v) return;
    res.dram_base = r.address(*v, "dram_base", "$.reservation").value_or(0);
    res.dram_bytes = r.u64(*v, "dram_bytes", "$.reservation").value_or(0);
    res.sram_base = r.address(*v, "sram_base", "$.reservation").value_or(0);
    res.sram_bytes = r.u64(*v, "sram_bytes", "$.reservation").value_or(0);
    res.sync_base = r.address(*v, "sync_base", "$.reservation").value_or(0);
    res.sync_bytes = r.u64(*v, "sync_bytes", "$.reservation").value_or(0);
}

void read_hashes(json_reader& r, const json::object& o, package& p) {
    const auto* a = r.array(o, "hashes", "$");
    if (!a) return;
    for (std::size_t i = 0; i < a->size(); ++i) {
        auto path = "$.hashes[" + std::to_string(i) + "]";
        const auto* h = r.object((*a)[i], path);
        if (!h) continue;
        hash_entry e;
        e.file = r.string(*h, "file", path).value_or("");
        e.size = r.u64(*h, "size", path).value_or(0);
        if (h->contains("sha256")) e.sha256 = r.string(*h, "sha256", path).value_or("");
        if (h->contains("sparse_digest")) e.sparse_digest = r.string(*h, "sparse_digest", path).value_or("");
        p.hashes.push_back(std::move(e));
    }
}

void read_top(json_reader& r, const json::object& o, package& p) {
    p.schema = static_cast<int>(r.u64(o, "schema", "$").value_or(0));
    if (const auto* m = r.object(o, "model", "$")) {
        p.model_name = r.string(*m, "name", "$.model").value_or("");
        p.architecture = r.string(*m, "architecture", "$.model").value_or("");
        if (m->contains("preset")) p.preset = r.string(*m, "preset", "$.model").value_or("");
    }
    p.context = static_cast<std::uint32_t>(r.u64(o, "context", "$").value_or(0));
    p.batch = static_cast<std::uint32_t>(r.u64(o, "batch", "$").value_or(0));
    p.vocab = static_cast<std::uint32_t>(r.u64(o, "vocab", "$").value_or(0));
    if (const auto* h = o.contains("sampling_head") ? r.object(o, "sampling_head", "$") : nullptr)
        p.sampling_head_k = static_cast<std::uint32_t>(r.u64(*h, "top_k", "$.sampling_head").value_or(0));
    if (o.contains("placement")) p.placement = r.string(o, "placement", "$").value_or("");
    if (const auto* l = r.object(o, "layout", "$")) {
        p.layout.activation_layout = r.string(*l, "activation_layout", "$.layout").value_or("");
        p.layout.tile_d0 = static_cast<std::uint32_t>(r.u64(*l, "tile_d0", "$.layout").value_or(0));
    }
    if (const auto* rt = r.object(o, "runtime", "$")) {
        p.runtime_name = r.string(*rt, "name", "$.runtime").value_or("");
        p.runtime_version = r.string(*rt, "version", "$.runtime").value_or("");
    }
    if (const auto* ref = o.if_contains("reference_model_dir"); ref && ref->is_string() && !ref->get_string().empty())
        p.reference_model_dir = p.root / std::string(ref->get_string());
}

}  // namespace

result<package> parse_manifest(std::string_view json_text, const std::filesystem::path& root) {
    boost::system::error_code ec;
    json::value doc = json::parse(json_text, ec);
    if (ec) return make_error(status::package_invalid, "manifest: malformed JSON: " + ec.message());
    json_reader r;
    const auto* o = r.object(doc, "$");
    if (!o) return make_error(status::package_invalid, "manifest: " + r.error());
    package p;
    p.root = root;
    read_top(r, *o, p);
    if (r.ok() && p.schema != k_manifest_schema)
        return make_error(status::package_invalid, "manifest: unsupported schema " + std::to_string(p.schema));
    read_kv(r, *o, p.kv);
    read_topology(r, *o, p);
    read_reservation(r, *o, p.reserved);
    if (const auto* a = r.array(*o, "submodels", "$"))
        for (std::size_t i = 0; i < a->size(); ++i)
            p.submodels.push_back(read_submodel(r, (*a)[i], "$.submodels[" + std::to_string(i) + "]"));
    read_hashes(r, *o, p);
    if (!r.ok()) return make_error(status::package_invalid, "manifest: " + r.error());
    if (auto inv = check_package_invariants(p); !inv) return inv.error();
    return p;
}

}  // namespace calserve::model::package
