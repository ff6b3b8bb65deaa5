// Hugging Face directory -> GGUF file (`make-model --format gguf`); see gguf_model.hpp.
#include <algorithm>
#include <boost/json.hpp>
#include <tuple>
#include <cmath>
#include <cstring>

#include "config/read_file.hpp"
#include "model/weights/gguf_model.hpp"
#include "model/core/bf16.hpp"
#include "model/weights/stored_rows.hpp"
#include "model/weights/weights.hpp"

namespace calserve::model {
namespace {
namespace json = boost::json;

// GGUF token types (llama.cpp's llama_token_type).
constexpr std::int64_t k_tok_normal = 1, k_tok_control = 3, k_tok_user = 4, k_tok_unused = 5;

result<gguf::tensor_type> target_type(std::string_view name, dtype source) {
    if (name == "keep") {
        switch (source) {
            case dtype::f32: return gguf::tensor_type::f32;
            case dtype::bf16: return gguf::tensor_type::bf16;
            case dtype::f16: return gguf::tensor_type::f16;
            case dtype::q8_0: return gguf::tensor_type::q8_0;
        }
    }
    if (name == "f32") return gguf::tensor_type::f32;
    if (name == "bf16") return gguf::tensor_type::bf16;
    if (name == "f16") return gguf::tensor_type::f16;
    if (name == "q8_0") return gguf::tensor_type::q8_0;
    return make_error(status::invalid_argument, "GGUF dtype must be keep, f32, bf16, f16 or q8_0, not " + std::string(name));
}

// Appends rows of `w` to `out` in type `t` (the bytes unchanged when the types agree).
void encode_rows(const tensor_view& w, gguf::tensor_type t, std::vector<std::byte>& out) {
    const auto cols = static_cast<std::size_t>(w.cols);
    std::vector<float> row(cols);
    for (std::int64_t r = 0; r < w.rows; ++r) {
        const std::size_t at = out.size();
        convert_row_to_f32(w, r, row.data());
        out.resize(at + gguf::tensor_bytes(t, cols));
        std::byte* dst = out.data() + at;
        if (t == gguf::tensor_type::q8_0) {
            quantize_q8_0(row.data(), w.cols, dst);
        } else if (t == gguf::tensor_type::f32) {
            std::memcpy(dst, row.data(), cols * 4);
        } else {
            for (std::size_t k = 0; k < cols; ++k) {
                const std::uint16_t h = t == gguf::tensor_type::bf16 ? f32_to_bf16(row[k]) : f32_to_f16(row[k]);
                std::memcpy(dst + 2 * k, &h, 2);
            }
        }
    }
}

struct converter {
    const checkpoint& ck;
    std::string_view dtype_name;
    gguf::writer& w;

    // One 2-D weight (or the stack of `views` as a 3-D tensor), in the target dtype.
    void_result matrices(const std::string& name, const std::vector<tensor_view>& views) {
        auto t = target_type(dtype_name, views.front().type);
        if (!t) return t.error();
        if (*t == gguf::tensor_type::q8_0 && views.front().cols % gguf::k_q8_block != 0)
            return make_error(status::invalid_argument, "tensor " + name + ": rows not a multiple of 32 for Q8_0");
        std::vector<std::byte> bytes;
        for (const auto& v : views) encode_rows(v, *t, bytes);
        std::vector<std::int64_t> dims{views.front().rows, views.front().cols};
        if (views.size() > 1) dims.insert(dims.begin(), static_cast<std::int64_t>(views.size()));
        return w.add_tensor(name, *t, std::move(dims), std::move(bytes));
    }
    void_result matrix(const std::string& gguf_name, const std::string& hf_name, std::int64_t rows, std::int64_t cols) {
        auto v = ck.matrix(hf_name, rows, cols);
        if (!v) return v.error();
        return matrices(gguf_name, {*v});
    }
    void_result norm(const std::string& gguf_name, const std::string& hf_name, std::int64_t n) {
        auto v = ck.vector_f32(hf_name, n);
        if (!v) return v.error();
        std::vector<std::byte> bytes(v->size() * 4);
        std::memcpy(bytes.data(), v->data(), bytes.size());
        return w.add_tensor(gguf_name, gguf::tensor_type::f32, {n}, std::move(bytes));
    }
};

std::string layer(std::int64_t i, const char* s) { return "model.layers." + std::to_string(i) + "." + s; }
std::string blk(std::int64_t i, const char* s) { return "blk." + std::to_string(i) + "." + s; }

void_result write_layer(converter& cv, const hf_config& c, std::int64_t i) {
    const std::int64_t h = c.hidden_size, qd = c.num_attention_heads * c.head_dim, kvd = c.num_key_value_heads * c.head_dim;
    void_result r;
    auto step = [&](void_result next) { if (r && !next) r = next; };
    step(cv.norm(blk(i, "attn_norm.weight"), layer(i, "input_layernorm.weight"), h));
    step(cv.norm(blk(i, "ffn_norm.weight"), layer(i, "post_attention_layernorm.weight"), h));
    step(cv.norm(blk(i, "attn_q_norm.weight"), layer(i, "self_attn.q_norm.weight"), c.head_dim));
    step(cv.norm(blk(i, "attn_k_norm.weight"), layer(i, "self_attn.k_norm.weight"), c.head_dim));
    step(cv.matrix(blk(i, "attn_q.weight"), layer(i, "self_attn.q_proj.weight"), qd, h));
    step(cv.matrix(blk(i, "attn_k.weight"), layer(i, "self_attn.k_proj.weight"), kvd, h));
    step(cv.matrix(blk(i, "attn_v.weight"), layer(i, "self_attn.v_proj.weight"), kvd, h));
    step(cv.matrix(blk(i, "attn_output.weight"), layer(i, "self_attn.o_proj.weight"), h, qd));
    if (!c.layer_is_moe(i)) {
        step(cv.matrix(blk(i, "ffn_gate.weight"), layer(i, "mlp.gate_proj.weight"), c.intermediate_size, h));
        step(cv.matrix(blk(i, "ffn_up.weight"), layer(i, "mlp.up_proj.weight"), c.intermediate_size, h));
        step(cv.matrix(blk(i, "ffn_down.weight"), layer(i, "mlp.down_proj.weight"), h, c.intermediate_size));
        return r;
    }
    step(cv.matrix(blk(i, "ffn_gate_inp.weight"), layer(i, "mlp.gate.weight"), c.num_experts, h));
    const std::int64_t f = c.moe_intermediate_size;
    for (auto [g, hf, rows, cols] : {std::tuple{"ffn_gate_exps.weight", "gate_proj.weight", f, h},
                                     std::tuple{"ffn_up_exps.weight", "up_proj.weight", f, h},
                                     std::tuple{"ffn_down_exps.weight", "down_proj.weight", h, f}}) {
        std::vector<tensor_view> views;
        for (std::int64_t e = 0; e < c.num_experts && r; ++e) {
            auto v = cv.ck.matrix(layer(i, ("mlp.experts." + std::to_string(e) + "." + hf).c_str()), rows, cols);
            if (!v) return v.error();
            views.push_back(*v);
        }
        step(cv.matrices(blk(i, g), views));
    }
    return r;
}

void write_hparams(gguf::writer& w, const hf_config& c, std::string_view name) {
    const std::string a = c.is_moe() ? "qwen3moe" : "qwen3";
    w.add_string("general.architecture", a);
    w.add_string("general.name", name);
    const std::string p = a + ".";
    w.add_u32(p + "block_count", static_cast<std::uint32_t>(c.num_hidden_layers));
    w.add_u32(p + "context_length", static_cast<std::uint32_t>(c.max_position_embeddings));
    w.add_u32(p + "embedding_length", static_cast<std::uint32_t>(c.hidden_size));
    w.add_u32(p + "feed_forward_length", static_cast<std::uint32_t>(c.intermediate_size));
    w.add_u32(p + "attention.head_count", static_cast<std::uint32_t>(c.num_attention_heads));
    w.add_u32(p + "attention.head_count_kv", static_cast<std::uint32_t>(c.num_key_value_heads));
    w.add_u32(p + "attention.key_length", static_cast<std::uint32_t>(c.head_dim));
    w.add_u32(p + "attention.value_length", static_cast<std::uint32_t>(c.head_dim));
    w.add_f32(p + "rope.freq_base", static_cast<float>(c.rope_theta));
    w.add_f32(p + "attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
    if (c.is_moe()) {
        w.add_u32(p + "expert_count", static_cast<std::uint32_t>(c.num_experts));
        w.add_u32(p + "expert_used_count", static_cast<std::uint32_t>(c.num_experts_per_tok));
        w.add_u32(p + "expert_feed_forward_length", static_cast<std::uint32_t>(c.moe_intermediate_size));
        w.add_bool(p + "expert_weights_norm", c.norm_topk_prob);
    }
}

result<json::value> read_json_object(const std::filesystem::path& file) {
    auto v = read_json_file(file);
    if (v && !v->is_object()) return make_error(status::parse_error, file.string() + ": not a JSON object");
    return v;
}

gguf::value string_array(std::vector<std::string> s) {
    gguf::value v;
    v.type = gguf::value_type::array;
    v.elem = gguf::value_type::string;
    v.strings = std::move(s);
    return v;
}

// The special token named by tokenizer_config's `key` (a string or {content}), or -1.
std::int64_t special_id(const json::object& cfg, std::string_view key, const std::vector<std::string>& tokens) {
    const json::value* v = cfg.if_contains(key);
    std::string name;
    if (v && v->is_string()) name = v->as_string();
    else if (v && v->is_object() && v->as_object().if_contains("content") && v->at("content").is_string())
        name = v->at("content").as_string();
    if (name.empty()) return -1;
    auto it = std::find(tokens.begin(), tokens.end(), name);
    return it == tokens.end() ? -1 : it - tokens.begin();
}

// The vocabulary, types and merges of tokenizer.json as llama.cpp embeds them (gpt2 / qwen2).
void_result write_tokenizer(gguf::writer& w, const std::filesystem::path& dir, std::int64_t vocab_size) {
    auto tj = read_json_object(dir / "tokenizer.json");
    if (!tj) return tj.error();
    auto cj = read_json_object(dir / "tokenizer_config.json");
    if (!cj) return cj.error();
    const json::object& root = tj->as_object();
    const json::value* model = root.if_contains("model");
    if (!model || !model->is_object() || !model->as_object().if_contains("vocab") || !model->at("vocab").is_object() ||
        !model->as_object().if_contains("merges") || !model->at("merges").is_array())
        return make_error(status::parse_error, "tokenizer.json: needs model.vocab and model.merges");
    std::vector<std::string> tokens(static_cast<std::size_t>(vocab_size));
    std::vector<std::int64_t> types(tokens.size(), k_tok_unused);
    auto place = [&](std::int64_t id, std::string s, std::int64_t type) {
        if (id < 0 || id > (1 << 24)) return;
        if (static_cast<std::size_t>(id) >= tokens.size()) tokens.resize(static_cast<std::size_t>(id) + 1), types.resize(tokens.size(), k_tok_unused);
        tokens[static_cast<std::size_t>(id)] = std::move(s);
        types[static_cast<std::size_t>(id)] = type;
    };
    for (const auto& kv : model->at("vocab").as_object())
        if (kv.value().is_int64()) place(kv.value().as_int64(), std::string(kv.key()), k_tok_normal);
    if (const json::value* added = root.if_contains("added_tokens"); added && added->is_array())
        for (const auto& a : added->as_array())
            if (a.is_object() && a.as_object().if_contains("id") && a.at("id").is_int64() && a.at("content").is_string())
                place(a.at("id").as_int64(), std::string(a.at("content").as_string()),
                      a.as_object().if_contains("special") && a.at("special").is_bool() && a.at("special").as_bool()
                          ? k_tok_control : k_tok_user);
    for (std::size_t i = 0; i < tokens.size(); ++i)
        if (types[i] == k_tok_unused) tokens[i] = "[PAD" + std::to_string(i) + "]";
    std::vector<std::string> merges;
    for (const auto& m : model->at("merges").as_array()) {
        if (m.is_string()) merges.emplace_back(m.as_string());
        else if (m.is_array() && m.as_array().size() == 2 && m.as_array()[0].is_string() && m.as_array()[1].is_string())
            merges.push_back(std::string(m.as_array()[0].as_string()) + " " + std::string(m.as_array()[1].as_string()));
    }
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", "qwen2");
    gguf::value tt;
    tt.type = gguf::value_type::array;
    tt.elem = gguf::value_type::i32;
    tt.ints = types;
    const json::object& cfg = cj->as_object();
    const std::int64_t eos = special_id(cfg, "eos_token", tokens), pad = special_id(cfg, "pad_token", tokens);
    w.add("tokenizer.ggml.tokens", string_array(std::move(tokens)));
    w.add("tokenizer.ggml.token_type", std::move(tt));
    w.add("tokenizer.ggml.merges", string_array(std::move(merges)));
    if (eos >= 0) w.add_u32("tokenizer.ggml.eos_token_id", static_cast<std::uint32_t>(eos));
    if (pad >= 0) w.add_u32("tokenizer.ggml.padding_token_id", static_cast<std::uint32_t>(pad));
    if (pad >= 0) w.add_u32("tokenizer.ggml.bos_token_id", static_cast<std::uint32_t>(pad));
    w.add_bool("tokenizer.ggml.add_bos_token", false);
    if (const json::value* t = cfg.if_contains("chat_template"); t && t->is_string())
        w.add_string("tokenizer.chat_template", t->as_string());
    return {};
}

}  // namespace

void quantize_q8_0(const float* x, std::int64_t n, std::byte* out) {
    for (std::int64_t b = 0; b < n / gguf::k_q8_block; ++b, x += gguf::k_q8_block, out += gguf::k_q8_block_bytes) {
        float amax = 0.0f;
        for (std::int64_t i = 0; i < gguf::k_q8_block; ++i) amax = std::max(amax, std::abs(x[i]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const std::uint16_t dh = f32_to_f16(d);
        std::memcpy(out, &dh, 2);
        for (std::int64_t i = 0; i < gguf::k_q8_block; ++i)
            out[2 + i] = static_cast<std::byte>(static_cast<std::int8_t>(std::lround(x[i] * id)));
    }
}

void_result write_gguf_from_hf(const std::filesystem::path& hf_dir, const std::filesystem::path& out_file,
                               std::string_view dtype_name) {
    auto cfg = load_hf_config(hf_dir);
    if (!cfg) return cfg.error();
    auto ck = checkpoint::load(hf_dir);
    if (!ck) return ck.error();
    const hf_config& c = *cfg;
    gguf::writer w;
    write_hparams(w, c, hf_dir.filename().string());
    if (std::filesystem::exists(hf_dir / "tokenizer.json"))
        if (auto r = write_tokenizer(w, hf_dir, c.vocab_size); !r) return r;
    if (!w.find_key("tokenizer.ggml.eos_token_id") && c.eos_token_id >= 0)
        w.add_u32("tokenizer.ggml.eos_token_id", static_cast<std::uint32_t>(c.eos_token_id));
    converter cv{*ck, dtype_name, w};
    if (auto r = cv.matrix("token_embd.weight", "model.embed_tokens.weight", c.vocab_size, c.hidden_size); !r) return r;
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i)
        if (auto r = write_layer(cv, c, i); !r) return r;
    if (auto r = cv.norm("output_norm.weight", "model.norm.weight", c.hidden_size); !r) return r;
    if (!c.tie_word_embeddings)
        if (auto r = cv.matrix("output.weight", "lm_head.weight", c.vocab_size, c.hidden_size); !r) return r;
    return w.write(out_file);
}

}  // namespace calserve::model
