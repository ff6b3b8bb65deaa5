// Op sequences and the chip0 address map generated from a preset.
#include "model/package/op_map.hpp"

#include <algorithm>

namespace calserve::model::package {

namespace {

struct seq_builder {
    std::vector<op_entry> ops;
    void add(std::string type, std::string name, std::int32_t layer) {
        op_entry e;
        e.id = static_cast<std::uint32_t>(ops.size());
        e.type = std::move(type);
        e.name = std::move(name);
        e.layer = layer;
        ops.push_back(std::move(e));
    }
};

void add_layer(seq_builder& b, const preset_spec& s, bool prefill, std::int32_t l) {
    std::string p = "l";
    p += std::to_string(l);
    p += '.';
    const bool tp = s.chips > 1;
    b.add("rmsnorm", p + "input_norm", l);
    for (const char* proj : {"q_proj", "k_proj", "v_proj"}) b.add("qmatmul", p + proj, l);
    b.add("rmsnorm", p + "q_norm", l);
    b.add("rmsnorm", p + "k_norm", l);
    b.add("rope", p + "rope_q", l);
    b.add("rope", p + "rope_k", l);
    b.add("kv_scatter", p + "kv_scatter_k", l);
    b.add("kv_scatter", p + "kv_scatter_v", l);
    b.add("flash_attention", p + "attention", l);
    b.add("qmatmul", p + "o_proj", l);
    if (tp) b.add("allreduce", p + "attn_allreduce", l);
    if (tp && prefill) b.add("d2d_gather", p + "attn_gather", l);
    b.add("residual_add", p + "attn_residual", l);
    b.add("rmsnorm", p + "post_attention_norm", l);
    const char* mm = s.moe() ? "moe_grouped_dense" : "qmatmul";
    if (s.moe()) b.add("router_pre", p + "router_logits", l);
    if (s.moe()) b.add("router_post", p + "router_topk", l);
    b.add(mm, p + "gate_proj", l);
    b.add(mm, p + "up_proj", l);
    b.add("silu", p + "act", l);
    b.add("multiply", p + "gate_mul", l);
    b.add(mm, p + "down_proj", l);
    if (s.moe()) b.add("reduce", p + "expert_reduce", l);
    if (tp) b.add("allreduce", p + "mlp_allreduce", l);
    if (tp && prefill) b.add("d2d_gather", p + "mlp_gather", l);
    b.add("reshape", p + "hidden_reshape", l);
    b.add("residual_add", p + "mlp_residual", l);
}

bool takes_dram_const(const std::string& type) {
    return type == "embedding" || type == "qmatmul" || type == "moe_grouped_dense";
}
bool takes_sram_const(const std::string& type) { return type == "rmsnorm" || type == "router_pre"; }

// Splits [base, base+bytes) into n chunks (64-byte aligned, remainder on the last).
std::vector<std::pair<std::uint64_t, std::uint64_t>> split(std::uint64_t base, std::uint64_t bytes, std::size_t n) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
    if (n == 0 || bytes == 0) return out;
    const std::uint64_t chunk = std::max<std::uint64_t>(bytes / n / 64 * 64, 64);
    std::uint64_t off = 0;
    for (std::size_t i = 0; i < n && off < bytes; ++i) {
        const std::uint64_t size = (i + 1 == n) ? bytes - off : std::min(chunk, bytes - off);
        out.emplace_back(base + off, size);
        off += size;
    }
    return out;
}

op_tensor raw_tensor(tensor_kind k, std::uint64_t addr, std::uint64_t size) {
    op_tensor t;
    t.kind = k;
    t.addr = addr;
    t.size = size;
    if (size % 2 == 0 && k == tensor_kind::activation) {
        t.shape = {static_cast<std::int64_t>(size / 2)};
        t.dtype = "BF16";
    } else {
        t.shape = {static_cast<std::int64_t>(size)};
        t.dtype = "U8";
    }
    return t;
}

op_tensor io_tensor(const tensor_spec& spec) {
    op_tensor t;
    t.kind = tensor_kind::input;
    t.addr = spec.ping_addr;
    t.size = spec.byte_size;
    t.shape = spec.shape;
    t.dtype = std::string(to_string(spec.type));
    return t;
}

void place_constants(op_map& m, const preset_spec& s, const package& p, const address_plan& a) {
    std::vector<op_entry*> dram, sram;
    for (auto& op : m.ops) {
        if (takes_dram_const(op.type)) dram.push_back(&op);
        if (takes_sram_const(op.type)) sram.push_back(&op);
    }
    auto d = split(a.param_dram_base, s.param_dram[0] - s.const_unreferenced, dram.size());
    for (std::size_t i = 0; i < d.size(); ++i)
        dram[i]->inputs.push_back(raw_tensor(tensor_kind::constant, d[i].first, d[i].second));
    auto r = split(p.reserved.sram_base, s.param_sram, sram.size());
    for (std::size_t i = 0; i < r.size(); ++i)
        sram[i]->inputs.push_back(raw_tensor(tensor_kind::constant, r[i].first, r[i].second));
}

// Workspace buffers reused round-robin by the ops that produce plain activations.
std::vector<std::pair<std::uint64_t, std::uint64_t>> workspace_buffers(const address_plan& a, bool prefill) {
    if (!prefill) return split(a.decode_sram_base, a.decode_sram_bytes, 4);
    auto out = split(a.prefill_ws_base, a.prefill_ws_bytes, 8);
    for (auto b : split(a.prefill_sram_base, a.prefill_sram_bytes, 2)) out.push_back(b);
    return out;
}

void place_activations(op_map& m, const package& p, const address_plan& a, const submodel& sm) {
    const auto ws = workspace_buffers(a, sm.role == submodel_role::prefill);
    auto kv = split(a.kv_base, a.kv_bytes, 2 * static_cast<std::size_t>(p.kv.layers));
    std::size_t next_ws = 0, next_kv = 0;
    std::int64_t last = -1;
    std::vector<op_tensor> layer_kv;
    for (auto& op : m.ops) {
        if (op.type == "embedding") op.inputs.insert(op.inputs.begin(), io_tensor(*sm.input("token")));
        if (op.name == "token_cast") op.inputs.insert(op.inputs.begin(), io_tensor(*sm.input("token")));
        if (op.name == "position_cast") op.inputs.insert(op.inputs.begin(), io_tensor(*sm.input("position")));
        if (last >= 0) {
            op_tensor prev = m.ops[static_cast<std::size_t>(last)].outputs.front();
            prev.producer = last;
            op.inputs.insert(op.inputs.begin(), prev);
        }
        if (op.type == "flash_attention")
            for (auto t : layer_kv) op.inputs.push_back(t);
        op_tensor out;
        if (op.type == "kv_scatter" && next_kv < kv.size()) {
            out = raw_tensor(tensor_kind::activation, kv[next_kv].first, kv[next_kv].second);
            ++next_kv;
            if (op.name.ends_with("_k")) layer_kv.clear();
            layer_kv.push_back(out);
            layer_kv.back().producer = static_cast<std::int64_t>(op.id);
        } else if (op.name == "logits_cast") {
            const auto& lg = *sm.output("logits");
            out = io_tensor(lg);
            out.kind = tensor_kind::activation;
        } else {
            const auto& b = ws[next_ws++ % ws.size()];
            out = raw_tensor(tensor_kind::activation, b.first, b.second);
        }
        op.outputs.push_back(out);
        if (op.type != "kv_scatter") last = static_cast<std::int64_t>(op.id);
    }
}

}  // namespace

std::vector<op_entry> op_sequence(const preset_spec& s, submodel_role role, std::uint32_t chip) {
    seq_builder b;
    const bool prefill = role == submodel_role::prefill;
    if (chip == 0) b.add("embedding", "embedding", -1);
    if (prefill) b.add("cast", "token_cast", -1);
    b.add("cast", "position_cast", -1);
    for (std::uint32_t l = 0; l < s.layers; ++l) add_layer(b, s, prefill, static_cast<std::int32_t>(l));
    if (prefill) b.add("slice", "slice_last_token", -1);
    b.add("rmsnorm", "final_norm", -1);
    b.add("qmatmul", "lm_head", -1);
    if (s.chips > 1) b.add("allgather", "logits_gather", -1);
    b.add("cast", "logits_cast", -1);
    return b.ops;
}

op_map build_op_map(const preset_spec& s, const package& p, const submodel& sm) {
    op_map m;
    m.submodel = sm.name;
    m.chip = 0;
    m.ops = op_sequence(s, sm.role, 0);
    const auto a = plan_addresses(s, p);
    place_activations(m, p, a, sm);
    place_constants(m, s, p, a);
    return m;
}

std::map<std::string, std::uint64_t> family_counts(const std::vector<op_entry>& ops) {
    std::map<std::string, std::uint64_t> out;
    for (const auto& op : ops) ++out[op.type];
    return out;
}

}  // namespace calserve::model::package
