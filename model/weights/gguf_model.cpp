// GGUF checkpoints as Hugging Face checkpoints: header, config, renamed tensors; see gguf_model.hpp.
#include "model/weights/gguf_model.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <set>

namespace calserve::model {
namespace {

constexpr std::uint64_t k_first_prefix_bytes = 8u << 20;  // a Qwen vocabulary's metadata is ~6 MB

error_info bad(const std::string& msg) { return make_error(status::package_invalid, "GGUF: " + msg); }

// GGUF per-layer tensor suffix -> Hugging Face per-layer suffix.
constexpr std::array<std::pair<std::string_view, std::string_view>, 13> k_layer_names{{
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"ffn_gate_inp.weight", "mlp.gate.weight"},
    {"", ""},
}};
constexpr std::array<std::pair<std::string_view, std::string_view>, 3> k_expert_names{{
    {"ffn_gate_exps.weight", "gate_proj.weight"},
    {"ffn_up_exps.weight", "up_proj.weight"},
    {"ffn_down_exps.weight", "down_proj.weight"},
}};
constexpr std::array<std::pair<std::string_view, std::string_view>, 3> k_global_names{{
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
}};

dtype to_dtype(gguf::tensor_type t) {
    switch (t) {
        case gguf::tensor_type::f32: return dtype::f32;
        case gguf::tensor_type::f16: return dtype::f16;
        case gguf::tensor_type::bf16: return dtype::bf16;
        case gguf::tensor_type::q8_0: return dtype::q8_0;
    }
    return dtype::f32;
}

// "blk.<n>.<rest>" -> n and rest; false for other names.
bool split_layer(std::string_view name, std::int64_t& layer, std::string_view& rest) {
    if (!name.starts_with("blk.")) return false;
    name.remove_prefix(4);
    const auto dot = name.find('.');
    if (dot == 0 || dot == std::string_view::npos || dot > 6) return false;
    layer = 0;
    for (char c : name.substr(0, dot)) {
        if (c < '0' || c > '9') return false;
        layer = layer * 10 + (c - '0');
    }
    rest = name.substr(dot + 1);
    return true;
}

std::string hf_layer(std::int64_t layer, std::string_view suffix) {
    return "model.layers." + std::to_string(layer) + "." + std::string(suffix);
}

// Appends the Hugging Face view(s) of one GGUF tensor to `out`.
void_result rename_tensor(const gguf::tensor& t, std::vector<tensor_info>& out) {
    tensor_info info{t.name, to_dtype(t.type), t.dims, t.offset, t.offset + t.bytes};
    for (const auto& [g, h] : k_global_names)
        if (t.name == g) return info.name = std::string(h), out.push_back(std::move(info)), void_result{};
    std::int64_t layer = 0;
    std::string_view rest;
    if (split_layer(t.name, layer, rest)) {
        for (const auto& [g, h] : k_layer_names)
            if (!g.empty() && rest == g) return info.name = hf_layer(layer, h), out.push_back(std::move(info)), void_result{};
        for (const auto& [g, h] : k_expert_names) {
            if (rest != g) continue;
            if (t.dims.size() != 3) return bad("tensor " + t.name + " must be 3-D [experts, rows, cols]");
            const std::uint64_t each = t.bytes / static_cast<std::uint64_t>(t.dims[0]);
            for (std::int64_t e = 0; e < t.dims[0]; ++e) {
                const std::uint64_t begin = t.offset + each * static_cast<std::uint64_t>(e);
                out.push_back({hf_layer(layer, "mlp.experts." + std::to_string(e) + "." + std::string(h)), info.type,
                               {t.dims[1], t.dims[2]}, begin, begin + each});
            }
            return {};
        }
    }
    out.push_back(std::move(info));  // unknown: kept under its GGUF name, never bound
    return {};
}

// Reads a required or optional integer hyperparameter into `dst`.
void_result get_int(const gguf::header& h, const std::string& key, bool required, std::int64_t& dst) {
    auto v = h.integer(key);
    if (!v) return v.error();
    if (!*v) return required ? bad("missing key " + key) : void_result{};
    dst = **v;
    return {};
}

result<std::string> architecture(const gguf::header& h, std::string& hf_arch) {
    auto arch = h.string("general.architecture");
    if (!arch) return arch.error();
    if (!*arch) return bad("missing key general.architecture");
    if (**arch == "qwen3") hf_arch = "Qwen3ForCausalLM";
    else if (**arch == "qwen3moe") hf_arch = "Qwen3MoeForCausalLM";
    else return bad("architecture '" + **arch + "' unsupported (qwen3, qwen3moe are)");
    return **arch;
}

const gguf::tensor* find_tensor(const gguf::header& h, std::string_view name) {
    for (const auto& t : h.tensors)
        if (t.name == name) return &t;
    return nullptr;
}

}  // namespace

bool is_gguf_file(const std::filesystem::path& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return false;
    std::ifstream in(path, std::ios::binary);
    char magic[4] = {};
    return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

result<gguf::header> read_gguf_header(const std::filesystem::path& path, const io::read_options& opts) {
    auto size = io::file_size(path);
    if (!size) return size.error();
    const std::string label = path.filename().string();
    std::uint64_t want = std::min<std::uint64_t>(*size, k_first_prefix_bytes);
    for (;;) {
        std::vector<std::byte> prefix(static_cast<std::size_t>(want));
        if (auto r = io::read_range(path, 0, prefix, opts); !r) return r.error();
        bool more = false;
        auto h = gguf::parse_header(prefix, *size, label, &more);
        if (h || !more || want == *size) return h;
        want = std::min<std::uint64_t>(*size, want * 4);
    }
}

result<hf_config> hf_config_from_gguf(const gguf::header& h) {
    hf_config c;
    auto arch = architecture(h, c.architecture);
    if (!arch) return arch.error();
    const std::string a = *arch + ".";
    const bool moe = *arch == "qwen3moe";
    c.num_key_value_heads = -1;
    c.head_dim = -1;
    struct field { std::string key; bool required; std::int64_t* dst; };
    const field ints[] = {
        {a + "block_count", true, &c.num_hidden_layers},
        {a + "embedding_length", true, &c.hidden_size},
        {a + "attention.head_count", true, &c.num_attention_heads},
        {a + "attention.head_count_kv", false, &c.num_key_value_heads},
        {a + "attention.key_length", false, &c.head_dim},
        {a + "feed_forward_length", !moe, &c.intermediate_size},
        {a + "context_length", true, &c.max_position_embeddings},
        {a + "expert_count", moe, &c.num_experts},
        {a + "expert_used_count", moe, &c.num_experts_per_tok},
        {a + "expert_feed_forward_length", moe, &c.moe_intermediate_size},
        {"tokenizer.ggml.eos_token_id", false, &c.eos_token_id},
    };
    for (const auto& f : ints)
        if (auto r = get_int(h, f.key, f.required, *f.dst); !r) return r.error();
    if (c.num_key_value_heads < 0) c.num_key_value_heads = c.num_attention_heads;
    if (c.head_dim < 0) c.head_dim = c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0;
    auto theta = h.number(a + "rope.freq_base");
    auto eps = h.number(a + "attention.layer_norm_rms_epsilon");
    if (!theta) return theta.error();
    if (!eps) return eps.error();
    if (!*eps) return bad("missing key " + a + "attention.layer_norm_rms_epsilon");
    c.rope_theta = theta->value_or(10000.0);  // llama.cpp's default
    c.rms_norm_eps = **eps;
    // llama.cpp renormalises Qwen3-MoE's top-k weights; a file may say otherwise.
    std::int64_t norm = 1;
    if (auto r = get_int(h, a + "expert_weights_norm", false, norm); !r) return r.error();
    c.norm_topk_prob = norm != 0;
    const gguf::tensor* embd = find_tensor(h, "token_embd.weight");
    if (!embd || embd->dims.size() != 2) return bad("missing 2-D tensor token_embd.weight");
    c.vocab_size = embd->dims[0];
    c.tie_word_embeddings = find_tensor(h, "output.weight") == nullptr;
    std::set<std::string, std::less<>> names;
    for (const auto& t : h.tensors) names.insert(t.name);
    for (std::int64_t l = 0; moe && l < c.num_hidden_layers && l < 100000; ++l)
        if (!names.contains("blk." + std::to_string(l) + ".ffn_gate_inp.weight")) c.mlp_only_layers.push_back(l);
    if (!moe) c.num_experts = 0;
    if (moe && c.intermediate_size == 0) c.intermediate_size = c.moe_intermediate_size;
    // The same validation as config.json (positive sizes, head ratios, top-k bounds).
    auto checked = parse_hf_config(c.to_json());
    if (!checked) return bad("hyperparameters: " + checked.error().message);
    return checked;
}

result<safetensors_file> load_gguf_tensors(const std::filesystem::path& path, const gguf::header& h,
                                           const io::read_options& opts, io::read_report* report) {
    safetensors_file f;
    f.path = path;
    f.header.data_offset = h.data_offset;
    for (const auto& t : h.tensors)
        if (auto r = rename_tensor(t, f.header.tensors); !r) return r.error();
    f.data_bytes = h.data_bytes;
    f.data = make_aligned_bytes(f.data_bytes);
    if (auto r = io::read_range(path, h.data_offset, std::span(f.data.get(), f.data_bytes), opts, report); !r)
        return r.error();
    return f;
}

std::string gguf_tensor_name(const std::string& hf_name, int* expert) {
    if (expert) *expert = -1;
    for (const auto& [g, h] : k_global_names)
        if (hf_name == h) return std::string(g);
    std::string_view n = hf_name;
    if (!n.starts_with("model.layers.")) return {};
    n.remove_prefix(13);
    const auto dot = n.find('.');
    if (dot == std::string_view::npos) return {};
    const std::string blk = "blk." + std::string(n.substr(0, dot)) + ".";
    std::string_view rest = n.substr(dot + 1);
    for (const auto& [g, h] : k_layer_names)
        if (!g.empty() && rest == h) return blk + std::string(g);
    if (!rest.starts_with("mlp.experts.")) return {};
    rest.remove_prefix(12);
    const auto edot = rest.find('.');
    if (edot == std::string_view::npos) return {};
    for (const auto& [g, h] : k_expert_names) {
        if (rest.substr(edot + 1) != h) continue;
        if (expert) *expert = std::stoi(std::string(rest.substr(0, edot)));
        return blk + std::string(g);
    }
    return {};
}

}  // namespace calserve::model
