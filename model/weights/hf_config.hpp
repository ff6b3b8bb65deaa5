#pragma once
//! The Hugging Face `config.json` of a Qwen3 (dense) or Qwen3-MoE checkpoint.
//!
//! Role: parse and validate the fields the reference transformer needs, with
//! Hugging Face's defaults for optional ones (head_dim = hidden / heads,
//! decoder_sparse_step = 1, ...). Fault model: a missing required field, a
//! wrong type, an unknown architecture or inconsistent sizes (heads not a
//! multiple of KV heads, top-k > experts) is a `package_invalid` error naming
//! the field. Invariants of a parsed config: all sizes > 0, num_heads %
//! num_kv_heads == 0, experts_per_token <= num_experts.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "config/result.hpp"

namespace calserve::model {

struct hf_config {
    std::string architecture;  // Qwen3ForCausalLM | Qwen3MoeForCausalLM
    std::int64_t vocab_size = 0;
    std::int64_t hidden_size = 0;
    std::int64_t num_hidden_layers = 0;
    std::int64_t num_attention_heads = 0;
    std::int64_t num_key_value_heads = 0;
    std::int64_t head_dim = 0;
    std::int64_t intermediate_size = 0;
    double rope_theta = 1000000.0;
    double rms_norm_eps = 1e-6;
    bool tie_word_embeddings = false;
    std::int64_t max_position_embeddings = 0;
    std::int64_t eos_token_id = -1;
    // MoE (0 experts = dense).
    std::int64_t num_experts = 0;
    std::int64_t num_experts_per_tok = 0;
    std::int64_t moe_intermediate_size = 0;
    bool norm_topk_prob = false;
    std::int64_t decoder_sparse_step = 1;
    std::vector<std::int64_t> mlp_only_layers;

    bool is_moe() const { return num_experts > 0; }
    // Whether layer `i` uses the sparse MoE block (Qwen3-MoE's rule).
    bool layer_is_moe(std::int64_t i) const;
    // Serialises the config as Hugging Face writes it; torch_dtype is informative only.
    std::string to_json(std::string_view torch_dtype = "bfloat16") const;
};

result<hf_config> parse_hf_config(std::string_view json_text);
// `model_dir/config.json`, or the hyperparameters of a GGUF file.
result<hf_config> load_hf_config(const std::filesystem::path& model_dir);

}  // namespace calserve::model
