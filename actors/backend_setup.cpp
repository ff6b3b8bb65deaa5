#include "actors/backend_setup.hpp"

#include "model/hf_config.hpp"

namespace calserve::actors {

namespace {
device::tensor_desc tensor(std::string name, std::vector<std::int64_t> shape, device::dtype type, std::uint64_t& next) {
    device::tensor_desc t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.type = type;
    t.bytes = std::uint64_t(t.elements()) * device::dtype_size(type);
    std::uint64_t aligned = (t.bytes + 4095) / 4096 * 4096;
    t.ping_address = next;
    t.pong_address = next + aligned;
    next += 2 * aligned;
    return t;
}

device::submodel_desc submodel(std::string name, device::submodel_kind kind, std::int64_t tokens, std::int64_t vocab,
                               std::uint64_t& next) {
    device::submodel_desc sm;
    sm.name = std::move(name);
    sm.kind = kind;
    sm.max_tokens = tokens;
    sm.inputs.push_back(tensor("token", {1, tokens}, device::dtype::int32, next));
    sm.inputs.push_back(tensor("position", {1, tokens}, device::dtype::int32, next));
    sm.outputs.push_back(tensor("logits", {1, 1, vocab}, device::dtype::bf16, next));
    sm.csrs = {{std::string(device::k_csr_cur_seq_len), 0x1104}, {std::string(device::k_csr_past_kv_len), 0x1144}};
    return sm;
}
}  // namespace

result<device::package_spec> cpu_package_spec(const std::filesystem::path& model_dir, std::int64_t context,
                                              std::int64_t kv_sequences) {
    auto hf = model::load_hf_config(model_dir);
    if (!hf) return hf.error();
    device::package_spec spec;
    spec.name = model_dir.filename().string();
    if (spec.name.empty()) spec.name = model_dir.parent_path().filename().string();
    spec.architecture = hf->architecture;
    spec.runtime_version = "cpu";
    spec.compiler_version = "none";
    spec.vocab_size = hf->vocab_size;
    spec.context = std::min(context, hf->max_position_embeddings > 0 ? hf->max_position_embeddings : context);
    spec.chip_count = 1;
    std::uint64_t next = 0x10000000;
    spec.submodels.push_back(submodel("prefill", device::submodel_kind::prefill, spec.context, spec.vocab_size, next));
    spec.submodels.push_back(submodel("decode", device::submodel_kind::decode, 1, spec.vocab_size, next));
    spec.kv.layers = hf->num_hidden_layers;
    spec.kv.kv_heads = hf->num_key_value_heads;
    spec.kv.head_dim = hf->head_dim;
    spec.kv.context = spec.context;
    spec.kv.slots = kv_sequences;
    spec.chips.push_back(device::chip_memory{0, 0});
    spec.reference_model_dir = model_dir;
    spec.hidden_size = hf->hidden_size;
    spec.num_heads = hf->num_attention_heads;
    spec.intermediate_size = hf->is_moe() ? hf->moe_intermediate_size : hf->intermediate_size;
    spec.num_experts = hf->num_experts;
    spec.experts_per_token = hf->num_experts_per_tok;
    if (auto ok = device::validate(spec); !ok) return ok.error();
    return spec;
}

}  // namespace calserve::actors
