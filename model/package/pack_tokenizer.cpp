// __Tokenizer/: tokenizer files, derived vocab/merges, HF config and the vocab GGUF.
#include <boost/json.hpp>

#include "config/read_file.hpp"
#include "model/package/gguf.hpp"
#include "model/package/pack.hpp"

namespace calserve::model::package {

namespace json = boost::json;

namespace {

json::object hf_config_json(const preset_spec& s, const package& p) {
    json::object c{{"architectures", json::array{s.moe() ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM"}},
                   {"model_type", s.moe() ? "qwen3_moe" : "qwen3"},
                   {"vocab_size", p.vocab},
                   {"hidden_size", s.hidden},
                   {"num_hidden_layers", s.layers},
                   {"num_attention_heads", s.heads},
                   {"num_key_value_heads", s.kv_heads},
                   {"head_dim", s.head_dim},
                   {"intermediate_size", s.intermediate},
                   {"max_position_embeddings", p.context},
                   {"rms_norm_eps", 1e-6},
                   {"rope_theta", 1000000.0},
                   {"tie_word_embeddings", false},
                   {"torch_dtype", "bfloat16"},
                   {"bos_token_id", 151643},
                   {"eos_token_id", 151645}};
    if (s.moe()) {
        c["num_experts"] = s.experts;
        c["num_experts_per_tok"] = s.experts_per_token;
        c["moe_intermediate_size"] = s.moe_intermediate;
        c["norm_topk_prob"] = true;
        c["decoder_sparse_step"] = 1;
    }
    return c;
}

std::string merges_text(const json::array& merges) {
    std::string out = "#version: 0.2\n";
    for (const auto& m : merges) {
        if (m.is_string()) {
            out.append(m.get_string());
        } else if (m.is_array() && m.get_array().size() == 2 && m.get_array()[0].is_string() &&
                   m.get_array()[1].is_string()) {
            out.append(m.get_array()[0].get_string()).push_back(' ');
            out.append(m.get_array()[1].get_string());
        }
        out.push_back('\n');
    }
    return out;
}

}  // namespace

result<std::vector<std::string>> write_tokenizer_dir(const preset_spec& s, const package& p,
                                                     const std::filesystem::path& tokenizer_dir,
                                                     const std::filesystem::path& root) {
    auto tok_text = read_text_file(tokenizer_dir / "tokenizer.json", k_json_file_bytes_max);
    auto cfg_text = read_text_file(tokenizer_dir / "tokenizer_config.json", k_json_file_bytes_max);
    if (!tok_text || !cfg_text)
        return make_error(status::invalid_argument, "tokenizer dir lacks tokenizer.json/tokenizer_config.json: " +
                                                        tokenizer_dir.string());
    boost::system::error_code ec;
    auto tok = json::parse(tok_text.value(), ec);
    const auto* model = tok.is_object() ? tok.get_object().if_contains("model") : nullptr;
    if (ec || !model || !model->is_object() || !model->get_object().contains("vocab"))
        return make_error(status::invalid_argument, "tokenizer.json is not a BPE tokenizer");
    const auto& vocab = model->get_object().at("vocab");
    const auto* merges = model->get_object().if_contains("merges");
    std::vector<std::string> tokens(vocab.is_object() ? vocab.get_object().size() : 0);
    for (const auto& kv : vocab.get_object())
        if (kv.value().is_int64() && static_cast<std::uint64_t>(kv.value().get_int64()) < tokens.size())
            tokens[static_cast<std::size_t>(kv.value().get_int64())] = std::string(kv.key());
    json::object added, special;
    if (const auto* at = tok.get_object().if_contains("added_tokens"); at && at->is_array())
        for (const auto& t : at->get_array())
            if (t.is_object() && t.get_object().contains("content") && t.get_object().contains("id"))
                added[t.get_object().at("content").get_string()] = t.get_object().at("id");
    special["eos_token"] = "<|im_end|>";
    special["pad_token"] = "<|endoftext|>";
    const std::string d = "__Tokenizer/";
    const std::vector<std::pair<std::string, std::string>> files{
        {d + "tokenizer.json", tok_text.value()},
        {d + "tokenizer_config.json", cfg_text.value()},
        {d + "vocab.json", json::serialize(vocab)},
        {d + "merges.txt", merges && merges->is_array() ? merges_text(merges->get_array()) : "#version: 0.2\n"},
        {d + "config.json", json::serialize(hf_config_json(s, p))},
        {d + "generation_config.json",
         R"({"bos_token_id":151643,"eos_token_id":[151645,151643],"do_sample":true,"temperature":0.6,"top_p":0.95,"top_k":20})"},
        {d + "special_tokens_map.json", json::serialize(special)},
        {d + "added_tokens.json", json::serialize(added)},
        {d + p.model_name + ".vocab.gguf", write_vocab_gguf(p.architecture, p.model_name, tokens)},
    };
    std::vector<std::string> names;
    for (const auto& [rel, data] : files) {
        if (auto w = write_file(root, rel, data); !w) return w.error();
        names.push_back(rel);
    }
    return names;
}

}  // namespace calserve::model::package
