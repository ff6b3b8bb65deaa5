// Seeded synthetic checkpoints; see synthetic_model.hpp.
#include "model/weights/synthetic_model.hpp"
#include "model/core/bf16.hpp"

#include <boost/json.hpp>
#include <cmath>
#include <cstring>
#include <fstream>

#include "model/weights/safetensors.hpp"

namespace calserve::model {
namespace {

constexpr double k_logit_std = 3.0;  // target spread of the logits

// splitmix64: tiny, fast and identical on every platform (std distributions are not).
struct rng {
    std::uint64_t state;
    std::uint64_t next() {
        std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    // Uniform in [-1, 1).
    float symmetric() { return static_cast<float>(static_cast<double>(next() >> 11) * 0x1.0p-52 - 1.0); }
};

std::uint64_t fnv1a(std::string_view s) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    return h;
}

// How one tensor is drawn: centre + uniform noise of the given standard deviation.
struct tensor_plan {
    std::string name;
    std::vector<std::int64_t> shape;
    float centre = 0.0f;
    float stddev = 0.0f;
};

std::vector<tensor_plan> plan_tensors(const hf_config& c) {
    const auto h = c.hidden_size, qd = c.num_attention_heads * c.head_dim, kvd = c.num_key_value_heads * c.head_dim;
    auto inv_sqrt = [](std::int64_t n) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(n))); };
    const auto out_std = static_cast<float>(k_logit_std / std::sqrt(static_cast<double>(h)));
    std::vector<tensor_plan> p;
    p.push_back({"model.embed_tokens.weight", {c.vocab_size, h}, 0.0f, out_std});
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
        const std::string l = "model.layers." + std::to_string(i) + ".";
        p.push_back({l + "input_layernorm.weight", {h}, 1.0f, 0.05f});
        p.push_back({l + "self_attn.q_proj.weight", {qd, h}, 0.0f, inv_sqrt(h)});
        p.push_back({l + "self_attn.k_proj.weight", {kvd, h}, 0.0f, inv_sqrt(h)});
        p.push_back({l + "self_attn.v_proj.weight", {kvd, h}, 0.0f, inv_sqrt(h)});
        p.push_back({l + "self_attn.o_proj.weight", {h, qd}, 0.0f, inv_sqrt(qd)});
        p.push_back({l + "self_attn.q_norm.weight", {c.head_dim}, 1.0f, 0.05f});
        p.push_back({l + "self_attn.k_norm.weight", {c.head_dim}, 1.0f, 0.05f});
        p.push_back({l + "post_attention_layernorm.weight", {h}, 1.0f, 0.05f});
        if (!c.layer_is_moe(i)) {
            p.push_back({l + "mlp.gate_proj.weight", {c.intermediate_size, h}, 0.0f, inv_sqrt(h)});
            p.push_back({l + "mlp.up_proj.weight", {c.intermediate_size, h}, 0.0f, inv_sqrt(h)});
            p.push_back({l + "mlp.down_proj.weight", {h, c.intermediate_size}, 0.0f, inv_sqrt(c.intermediate_size)});
            continue;
        }
        p.push_back({l + "mlp.gate.weight", {c.num_experts, h}, 0.0f, inv_sqrt(h)});
        for (std::int64_t e = 0; e < c.num_experts; ++e) {
            const std::string x = l + "mlp.experts." + std::to_string(e) + ".";
            p.push_back({x + "gate_proj.weight", {c.moe_intermediate_size, h}, 0.0f, inv_sqrt(h)});
            p.push_back({x + "up_proj.weight", {c.moe_intermediate_size, h}, 0.0f, inv_sqrt(h)});
            p.push_back({x + "down_proj.weight", {h, c.moe_intermediate_size}, 0.0f, inv_sqrt(c.moe_intermediate_size)});
        }
    }
    p.push_back({"model.norm.weight", {h}, 1.0f, 0.05f});
    if (!c.tie_word_embeddings) p.push_back({"lm_head.weight", {c.vocab_size, h}, 0.0f, out_std});
    return p;
}

std::int64_t elements(const tensor_plan& t) {
    std::int64_t n = 1;
    for (auto d : t.shape) n *= d;
    return n;
}

std::vector<std::byte> draw(const tensor_plan& t, std::uint64_t seed, dtype type) {
    rng r{seed ^ fnv1a(t.name)};
    const std::int64_t n = elements(t);
    const float amp = t.stddev * std::sqrt(3.0f);  // uniform [-a, a] has std a / sqrt(3)
    std::vector<std::byte> out(static_cast<std::size_t>(n) * dtype_size(type));
    for (std::int64_t i = 0; i < n; ++i) {
        const float v = t.centre + amp * r.symmetric();
        std::byte* dst = out.data() + static_cast<std::size_t>(i) * dtype_size(type);
        if (type == dtype::f32) {
            std::memcpy(dst, &v, 4);
        } else {
            std::uint16_t b = type == dtype::bf16 ? f32_to_bf16(v) : f32_to_f16(v);
            std::memcpy(dst, &b, 2);
        }
    }
    return out;
}

result<dtype> parse_dtype_name(std::string_view s) {
    if (s == "f32") return dtype::f32;
    if (s == "bf16") return dtype::bf16;
    if (s == "f16") return dtype::f16;
    return make_error(status::invalid_argument, "dtype must be f32, bf16 or f16, not " + std::string(s));
}

std::string_view torch_dtype_name(dtype t) {
    return t == dtype::f32 ? "float32" : t == dtype::bf16 ? "bfloat16" : "float16";
}

void_result write_text(const std::filesystem::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) return make_error(status::io_error, "cannot write " + path.string());
    return {};
}

// Splits the plan into shards of at most max_bytes (one shard when 0).
std::vector<std::vector<const tensor_plan*>> shard_plan(const std::vector<tensor_plan>& plan, dtype type,
                                                        std::uint64_t max_bytes) {
    std::vector<std::vector<const tensor_plan*>> shards(1);
    std::uint64_t used = 0;
    for (const auto& t : plan) {
        const auto bytes = static_cast<std::uint64_t>(elements(t)) * dtype_size(type);
        if (max_bytes > 0 && used > 0 && used + bytes > max_bytes) shards.emplace_back(), used = 0;
        shards.back().push_back(&t);
        used += bytes;
    }
    return shards;
}

std::string shard_name(std::size_t i, std::size_t n) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
    return buf;
}

}  // namespace

std::vector<std::string> synthetic_model_presets() {
    return {"tiny-dense", "tiny-moe", "micro-dense", "qwen3-0.6b-shape"};
}

result<synthetic_spec> synthetic_preset(std::string_view preset) {
    hf_config c;
    c.architecture = "Qwen3ForCausalLM";
    c.vocab_size = 151936;
    c.max_position_embeddings = 40960;
    c.rope_theta = 1000000.0;
    c.rms_norm_eps = 1e-6;
    c.eos_token_id = 151645;
    synthetic_spec s;
    if (preset == "tiny-dense" || preset == "tiny-moe") {
        c.hidden_size = 64, c.num_hidden_layers = 2, c.num_attention_heads = 4, c.num_key_value_heads = 2;
        c.head_dim = 32, c.intermediate_size = 128;
        if (preset == "tiny-moe") {
            c.architecture = "Qwen3MoeForCausalLM";
            c.num_experts = 8, c.num_experts_per_tok = 2, c.moe_intermediate_size = 64, c.norm_topk_prob = true;
        }
    } else if (preset == "micro-dense") {
        // The soak's model: tiny-dense's layers with a 16384-token vocabulary (the
        // tokenizer's first 16384 ids), so the LM head and sampling cost ~1/9 of
        // tiny-dense per token and a simulated hour stays cheap.
        c.vocab_size = 16384;
        c.hidden_size = 64, c.num_hidden_layers = 2, c.num_attention_heads = 4, c.num_key_value_heads = 2;
        c.head_dim = 32, c.intermediate_size = 128;
    } else if (preset == "qwen3-0.6b-shape") {
        c.hidden_size = 1024, c.num_hidden_layers = 28, c.num_attention_heads = 16, c.num_key_value_heads = 8;
        c.head_dim = 128, c.intermediate_size = 3072, c.tie_word_embeddings = true;
        s.max_shard_bytes = 512ull << 20;
    } else {
        return make_error(status::invalid_argument, "unknown preset " + std::string(preset) +
                                                        " (tiny-dense, tiny-moe, micro-dense, qwen3-0.6b-shape)");
    }
    s.config = c;
    return s;
}

void_result write_synthetic_model(const synthetic_spec& spec, const std::filesystem::path& out_dir, std::uint64_t seed,
                                  std::string_view dtype_name) {
    auto type = parse_dtype_name(dtype_name);
    if (!type) return type.error();
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    if (ec) return make_error(status::io_error, "cannot create " + out_dir.string() + ": " + ec.message());
    if (auto r = write_text(out_dir / "config.json", spec.config.to_json(torch_dtype_name(*type))); !r) return r;
    const auto plan = plan_tensors(spec.config);
    const auto shards = shard_plan(plan, *type, spec.max_shard_bytes);
    boost::json::object weight_map;
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < shards.size(); ++i) {
        const std::string file = shards.size() == 1 ? "model.safetensors" : shard_name(i, shards.size());
        std::vector<std::vector<std::byte>> data;
        std::vector<tensor_to_write> tensors;
        for (const tensor_plan* t : shards[i]) data.push_back(draw(*t, seed, *type));
        for (std::size_t j = 0; j < data.size(); ++j) {
            tensors.push_back({shards[i][j]->name, *type, shards[i][j]->shape, data[j]});
            weight_map[shards[i][j]->name] = file;
            total += data[j].size();
        }
        if (auto r = write_safetensors(out_dir / file, tensors); !r) return r;
    }
    if (shards.size() > 1) {
        boost::json::object index{{"metadata", boost::json::object{{"total_size", total}}},
                                  {"weight_map", std::move(weight_map)}};
        if (auto r = write_text(out_dir / "model.safetensors.index.json", boost::json::serialize(index) + "\n"); !r)
            return r;
    }
    return {};
}

void_result make_synthetic_model(std::string_view preset, const std::filesystem::path& out_dir, std::uint64_t seed,
                                 std::string_view dtype, const std::filesystem::path& tokenizer_dir) {
    auto spec = synthetic_preset(preset);
    if (!spec) return spec.error();
    if (auto r = write_synthetic_model(*spec, out_dir, seed, dtype); !r) return r;
    if (tokenizer_dir.empty()) return {};
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
        std::error_code ec;
        if (!std::filesystem::exists(tokenizer_dir / f))
            return make_error(status::not_found, "tokenizer file " + (tokenizer_dir / f).string() + " not found");
        std::filesystem::copy_file(tokenizer_dir / f, out_dir / f, std::filesystem::copy_options::overwrite_existing, ec);
        if (ec) return make_error(status::io_error, "cannot copy " + std::string(f) + ": " + ec.message());
    }
    return {};
}

}  // namespace calserve::model
