// config.json parsing and validation; see hf_config.hpp.
#include "model/weights/hf_config.hpp"

#include "config/read_file.hpp"
#include "model/weights/gguf_model.hpp"

#include <algorithm>
#include <boost/json.hpp>

namespace calserve::model {
namespace {
namespace json = boost::json;

error_info bad(const std::string& msg) { return make_error(status::package_invalid, "config.json: " + msg); }

// Reads an integer field; `required` fields must be present.
result<std::int64_t> get_int(const json::object& o, std::string_view key, bool required, std::int64_t dflt) {
    const json::value* v = o.if_contains(key);
    if (v == nullptr || v->is_null()) {
        if (required) return bad("missing field " + std::string(key));
        return dflt;
    }
    if (v->is_int64()) return v->as_int64();
    if (v->is_uint64()) return static_cast<std::int64_t>(v->as_uint64());
    return bad("field " + std::string(key) + " must be an integer");
}

result<double> get_num(const json::object& o, std::string_view key, double dflt) {
    const json::value* v = o.if_contains(key);
    if (v == nullptr || v->is_null()) return dflt;
    if (v->is_double()) return v->as_double();
    if (v->is_int64()) return static_cast<double>(v->as_int64());
    if (v->is_uint64()) return static_cast<double>(v->as_uint64());
    return bad("field " + std::string(key) + " must be a number");
}

result<bool> get_bool(const json::object& o, std::string_view key, bool dflt) {
    const json::value* v = o.if_contains(key);
    if (v == nullptr || v->is_null()) return dflt;
    if (!v->is_bool()) return bad("field " + std::string(key) + " must be a boolean");
    return v->as_bool();
}

// eos_token_id may be an integer or a list (the first entry is the one we report).
result<std::int64_t> get_eos(const json::object& o) {
    const json::value* v = o.if_contains("eos_token_id");
    if (v == nullptr || v->is_null()) return std::int64_t{-1};
    if (v->is_array()) {
        if (v->as_array().empty()) return std::int64_t{-1};
        const auto& first = v->as_array().front();
        if (first.is_int64()) return first.as_int64();
        return bad("eos_token_id entries must be integers");
    }
    if (v->is_int64()) return v->as_int64();
    return bad("eos_token_id must be an integer or a list");
}

result<std::string> get_architecture(const json::object& o) {
    const json::value* v = o.if_contains("architectures");
    if (v == nullptr || !v->is_array() || v->as_array().empty() || !v->as_array().front().is_string())
        return bad("missing architectures[0]");
    std::string arch(v->as_array().front().as_string());
    if (arch != "Qwen3ForCausalLM" && arch != "Qwen3MoeForCausalLM")
        return bad("unsupported architecture " + arch + " (expected Qwen3ForCausalLM or Qwen3MoeForCausalLM)");
    return arch;
}

void_result validate(const hf_config& c) {
    auto positive = [](std::int64_t v) { return v > 0; };
    if (!positive(c.vocab_size) || !positive(c.hidden_size) || !positive(c.num_hidden_layers) ||
        !positive(c.num_attention_heads) || !positive(c.num_key_value_heads) || !positive(c.head_dim) ||
        !positive(c.max_position_embeddings))
        return bad("sizes must be positive");
    if (c.num_attention_heads % c.num_key_value_heads != 0)
        return bad("num_attention_heads must be a multiple of num_key_value_heads");
    if (c.head_dim % 2 != 0) return bad("head_dim must be even (rotary embedding)");
    if (!(c.rms_norm_eps > 0) || !(c.rope_theta > 0)) return bad("rms_norm_eps and rope_theta must be positive");
    if (c.is_moe()) {
        if (c.num_experts_per_tok <= 0 || c.num_experts_per_tok > c.num_experts)
            return bad("num_experts_per_tok must be in [1, num_experts]");
        if (c.moe_intermediate_size <= 0) return bad("moe_intermediate_size must be positive");
        if (c.decoder_sparse_step <= 0) return bad("decoder_sparse_step must be positive");
    }
    bool needs_dense = !c.is_moe() || !c.mlp_only_layers.empty() || c.decoder_sparse_step > 1;
    if (needs_dense && c.intermediate_size <= 0) return bad("intermediate_size must be positive");
    return {};
}

result<hf_config> parse_object(const json::object& o) {
    hf_config c;
    auto arch = get_architecture(o);
    if (!arch) return arch.error();
    c.architecture = *arch;
    const bool moe = c.architecture == "Qwen3MoeForCausalLM";
    struct int_field {
        std::string_view key;
        std::int64_t* dst;
        bool required;
        std::int64_t dflt;
    };
    const int_field ints[] = {
        {"vocab_size", &c.vocab_size, true, 0},
        {"hidden_size", &c.hidden_size, true, 0},
        {"num_hidden_layers", &c.num_hidden_layers, true, 0},
        {"num_attention_heads", &c.num_attention_heads, true, 0},
        {"intermediate_size", &c.intermediate_size, !moe, 0},
        {"max_position_embeddings", &c.max_position_embeddings, false, 40960},
        {"num_experts", &c.num_experts, moe, 0},
        {"num_experts_per_tok", &c.num_experts_per_tok, moe, 0},
        {"moe_intermediate_size", &c.moe_intermediate_size, moe, 0},
        {"decoder_sparse_step", &c.decoder_sparse_step, false, 1},
    };
    for (const auto& f : ints) {
        auto v = get_int(o, f.key, f.required, f.dflt);
        if (!v) return v.error();
        *f.dst = *v;
    }
    if (!moe) c.num_experts = 0;
    auto kv = get_int(o, "num_key_value_heads", false, c.num_attention_heads);
    auto hd = get_int(o, "head_dim", false, c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0);
    auto theta = get_num(o, "rope_theta", 1000000.0);
    auto eps = get_num(o, "rms_norm_eps", 1e-6);
    auto tie = get_bool(o, "tie_word_embeddings", false);
    auto norm_topk = get_bool(o, "norm_topk_prob", false);
    auto bias = get_bool(o, "attention_bias", false);
    auto eos = get_eos(o);
    for (const error_info* e : {kv ? nullptr : &kv.error(), hd ? nullptr : &hd.error(),
                                theta ? nullptr : &theta.error(), eps ? nullptr : &eps.error(),
                                tie ? nullptr : &tie.error(), norm_topk ? nullptr : &norm_topk.error(),
                                bias ? nullptr : &bias.error(), eos ? nullptr : &eos.error()})
        if (e != nullptr) return *e;
    if (*bias) return bad("attention_bias = true is not supported (Qwen3 has no attention bias)");
    c.num_key_value_heads = *kv;
    c.head_dim = *hd;
    c.rope_theta = *theta;
    c.rms_norm_eps = *eps;
    c.tie_word_embeddings = *tie;
    c.norm_topk_prob = *norm_topk;
    c.eos_token_id = *eos;
    if (const json::value* v = o.if_contains("mlp_only_layers"); v != nullptr && !v->is_null()) {
        if (!v->is_array()) return bad("mlp_only_layers must be a list");
        for (const auto& e : v->as_array()) {
            if (!e.is_int64()) return bad("mlp_only_layers entries must be integers");
            c.mlp_only_layers.push_back(e.as_int64());
        }
    }
    if (auto r = validate(c); !r) return r.error();
    return c;
}

}  // namespace

bool hf_config::layer_is_moe(std::int64_t i) const {
    if (!is_moe()) return false;
    if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), i) != mlp_only_layers.end()) return false;
    return (i + 1) % decoder_sparse_step == 0;
}

std::string hf_config::to_json(std::string_view torch_dtype) const {
    json::object o;
    o["architectures"] = json::array{json::value(architecture)};
    o["model_type"] = is_moe() ? "qwen3_moe" : "qwen3";
    o["vocab_size"] = vocab_size;
    o["hidden_size"] = hidden_size;
    o["num_hidden_layers"] = num_hidden_layers;
    o["num_attention_heads"] = num_attention_heads;
    o["num_key_value_heads"] = num_key_value_heads;
    o["head_dim"] = head_dim;
    o["intermediate_size"] = intermediate_size;
    o["rope_theta"] = rope_theta;
    o["rms_norm_eps"] = rms_norm_eps;
    o["tie_word_embeddings"] = tie_word_embeddings;
    o["max_position_embeddings"] = max_position_embeddings;
    o["eos_token_id"] = eos_token_id;
    o["hidden_act"] = "silu";
    o["attention_bias"] = false;
    o["torch_dtype"] = torch_dtype;
    if (is_moe()) {
        o["num_experts"] = num_experts;
        o["num_experts_per_tok"] = num_experts_per_tok;
        o["moe_intermediate_size"] = moe_intermediate_size;
        o["norm_topk_prob"] = norm_topk_prob;
        o["decoder_sparse_step"] = decoder_sparse_step;
        json::array mlp_only;
        for (auto l : mlp_only_layers) mlp_only.emplace_back(l);
        o["mlp_only_layers"] = std::move(mlp_only);
    }
    return json::serialize(o) + "\n";
}

result<hf_config> parse_hf_config(std::string_view json_text) {
    boost::system::error_code ec;
    json::value v = json::parse(json_text, ec);
    if (ec) return bad("invalid JSON: " + ec.message());
    if (!v.is_object()) return bad("top level must be an object");
    return parse_object(v.as_object());
}

result<hf_config> load_hf_config(const std::filesystem::path& model_dir) {
    if (is_gguf_file(model_dir)) {
        auto h = read_gguf_header(model_dir);
        if (!h) return h.error();
        return hf_config_from_gguf(*h);
    }
    if (std::error_code ec; std::filesystem::is_regular_file(model_dir, ec))
        return make_error(status::package_invalid, model_dir.string() +
                                                       " is a file but not a GGUF file (no GGUF magic); --model takes a "
                                                       "Hugging Face directory or a GGUF file");
    auto doc = read_json_file(model_dir / "config.json");
    if (!doc) return doc.code() == status::parse_error ? make_error(status::package_invalid, doc.error().message) : doc.error();
    if (!doc->is_object()) return bad("top level must be an object");
    return parse_object(doc->as_object());
}

}  // namespace calserve::model
