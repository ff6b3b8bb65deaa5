// Loading and the public API of the reference transformer; see transformer.hpp.
#include "model/cpu/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "model/cpu/transformer_internal.hpp"

namespace calserve::model {
namespace {

std::string layer_name(std::int64_t i, const char* suffix) {
    return "model.layers." + std::to_string(i) + "." + suffix;
}

// Collects the first error of a series of view look-ups.
struct loader {
    const checkpoint& ck;
    error_info first{status::ok, {}};
    bool failed = false;

    tensor_view mat(const std::string& name, std::int64_t rows, std::int64_t cols) {
        auto v = ck.matrix(name, rows, cols);
        if (v) return *v;
        if (!failed) first = v.error(), failed = true;
        return {};
    }
    std::vector<float> vec(const std::string& name, std::int64_t n) {
        auto v = ck.vector_f32(name, n);
        if (v) return std::move(*v);
        if (!failed) first = v.error(), failed = true;
        return {};
    }
};

layer_weights load_layer(loader& ld, const hf_config& c, std::int64_t i) {
    const std::int64_t h = c.hidden_size, qd = c.num_attention_heads * c.head_dim;
    const std::int64_t kvd = c.num_key_value_heads * c.head_dim;
    layer_weights lw;
    lw.input_norm = ld.vec(layer_name(i, "input_layernorm.weight"), h);
    lw.post_norm = ld.vec(layer_name(i, "post_attention_layernorm.weight"), h);
    lw.q_norm = ld.vec(layer_name(i, "self_attn.q_norm.weight"), c.head_dim);
    lw.k_norm = ld.vec(layer_name(i, "self_attn.k_norm.weight"), c.head_dim);
    lw.q = ld.mat(layer_name(i, "self_attn.q_proj.weight"), qd, h);
    lw.k = ld.mat(layer_name(i, "self_attn.k_proj.weight"), kvd, h);
    lw.v = ld.mat(layer_name(i, "self_attn.v_proj.weight"), kvd, h);
    lw.o = ld.mat(layer_name(i, "self_attn.o_proj.weight"), h, qd);
    lw.moe = c.layer_is_moe(i);
    if (!lw.moe) {
        lw.gate = ld.mat(layer_name(i, "mlp.gate_proj.weight"), c.intermediate_size, h);
        lw.up = ld.mat(layer_name(i, "mlp.up_proj.weight"), c.intermediate_size, h);
        lw.down = ld.mat(layer_name(i, "mlp.down_proj.weight"), h, c.intermediate_size);
        return lw;
    }
    lw.router = ld.mat(layer_name(i, "mlp.gate.weight"), c.num_experts, h);
    for (std::int64_t e = 0; e < c.num_experts; ++e) {
        const std::string p = "mlp.experts." + std::to_string(e) + ".";
        lw.experts.push_back({ld.mat(layer_name(i, (p + "gate_proj.weight").c_str()), c.moe_intermediate_size, h),
                              ld.mat(layer_name(i, (p + "up_proj.weight").c_str()), c.moe_intermediate_size, h),
                              ld.mat(layer_name(i, (p + "down_proj.weight").c_str()), h, c.moe_intermediate_size)});
    }
    return lw;
}

result<std::vector<shard_range>> plan_shards(const hf_config& c, int tp) {
    if (tp != 1 && tp != 2) return make_error(status::invalid_argument, "tensor_parallel must be 1 or 2");
    auto even = [tp](std::int64_t v) { return v % tp == 0; };
    if (!even(c.num_attention_heads) || !even(c.num_key_value_heads) || !even(c.intermediate_size) ||
        !even(c.moe_intermediate_size))
        return make_error(status::unsupported, "tensor_parallel 2 needs even head, KV head and FFN counts");
    std::vector<shard_range> out;
    for (int s = 0; s < tp; ++s) {
        auto part = [&](std::int64_t n) { return std::pair{n * s / tp, n * (s + 1) / tp}; };
        shard_range r;
        std::tie(r.head_begin, r.head_end) = part(c.num_attention_heads);
        std::tie(r.kv_begin, r.kv_end) = part(c.num_key_value_heads);
        std::tie(r.ffn_begin, r.ffn_end) = part(c.intermediate_size);
        std::tie(r.moe_begin, r.moe_end) = part(c.moe_intermediate_size);
        out.push_back(r);
    }
    return out;
}

model_shape make_shape(const hf_config& c, std::int64_t weight_bytes) {
    model_shape s;
    s.architecture = c.architecture;
    s.vocab_size = c.vocab_size;
    s.hidden_size = c.hidden_size;
    s.num_layers = c.num_hidden_layers;
    s.num_heads = c.num_attention_heads;
    s.num_kv_heads = c.num_key_value_heads;
    s.head_dim = c.head_dim;
    s.intermediate_size = c.is_moe() ? c.moe_intermediate_size : c.intermediate_size;
    s.max_context = c.max_position_embeddings;
    s.num_experts = c.num_experts;
    s.experts_per_token = c.num_experts_per_tok;
    s.weight_bytes = weight_bytes;
    s.eos_token_id = c.eos_token_id;
    return s;
}

void_result bind_weights(transformer::impl& m) {
    loader ld{m.weights};
    const hf_config& c = m.cfg;
    m.embed = ld.mat("model.embed_tokens.weight", c.vocab_size, c.hidden_size);
    m.final_norm = ld.vec("model.norm.weight", c.hidden_size);
    m.lm_head = c.tie_word_embeddings ? m.embed : ld.mat("lm_head.weight", c.vocab_size, c.hidden_size);
    if (!ld.failed) m.lm_panels = panel_matrix::pack(m.lm_head);
    for (std::int64_t i = 0; i < c.num_hidden_layers && !ld.failed; ++i) m.layers.push_back(load_layer(ld, c, i));
    if (ld.failed) return ld.first;
    // HF computes inv_freq in FP32: 1 / theta^(2i / d).
    for (std::int64_t i = 0; i < c.head_dim / 2; ++i)
        m.inv_freq.push_back(static_cast<float>(
            1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(c.head_dim))));
    return {};
}

// The Q8_0 matrices interleaved once into the int8 kernel's panels (kernels.hpp
// q8_panels_pin): the same bits as packing per call, without its cost on every step. The
// transformer owns the checkpoint's bytes and reads its matrices only through the
// kernels (the embedding rows through row_to_f32), so they are rearranged in place: no
// second copy.
void pin_q8_panels(transformer::impl& m) {
    auto pin = [&](const tensor_view& w) {
        if (auto p = q8_panels_pin(w, const_cast<std::byte*>(w.data))) m.q8_pins.push_back(std::move(p));
    };
    for (const layer_weights& lw : m.layers) {
        for (const tensor_view* w : {&lw.q, &lw.k, &lw.v, &lw.o, &lw.gate, &lw.up, &lw.down, &lw.router}) pin(*w);
        for (const expert_weights& e : lw.experts)
            for (const tensor_view* w : {&e.gate, &e.up, &e.down}) pin(*w);
    }
    if (m.lm_panels.empty()) pin(m.lm_head);
}

// Q8_0 column slices (o_proj / down_proj per shard) must start on a 32-block.
void_result check_block_slices(const transformer::impl& m) {
    if (m.tp == 1) return {};
    for (const auto& lw : m.layers) {
        const bool q8 = lw.o.type == dtype::q8_0 || lw.down.type == dtype::q8_0 ||
                        (!lw.experts.empty() && lw.experts.front().down.type == dtype::q8_0);
        if (!q8) continue;
        for (const shard_range& s : m.shards)
            if ((s.head_begin * m.cfg.head_dim) % 32 != 0 || s.ffn_begin % 32 != 0 || s.moe_begin % 32 != 0)
                return make_error(status::unsupported, "tensor_parallel 2 with Q8_0 weights needs per-shard head and "
                                                       "FFN widths that are multiples of 32");
    }
    return {};
}

}  // namespace

std::vector<expert_choice> select_experts(std::span<const float> router_logits, std::int64_t k, bool renormalise) {
    std::vector<float> probs(router_logits.begin(), router_logits.end());
    softmax(probs.data(), static_cast<std::int64_t>(probs.size()));
    std::vector<expert_choice> out;
    std::vector<bool> taken(probs.size(), false);
    for (std::int64_t j = 0; j < k && j < static_cast<std::int64_t>(probs.size()); ++j) {
        std::int64_t best = -1;
        for (std::size_t e = 0; e < probs.size(); ++e)  // strict '>' keeps the lowest index on ties
            if (!taken[e] && (best < 0 || probs[e] > probs[static_cast<std::size_t>(best)]))
                best = static_cast<std::int64_t>(e);
        taken[static_cast<std::size_t>(best)] = true;
        out.push_back({static_cast<std::int32_t>(best), probs[static_cast<std::size_t>(best)]});
    }
    if (renormalise) {
        float sum = 0.0f;
        for (const auto& c : out) sum += c.weight;
        for (auto& c : out) c.weight /= sum;
    }
    return out;
}

transformer::transformer(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
transformer::~transformer() = default;

result<std::unique_ptr<transformer>> transformer::load(const std::filesystem::path& dir, const load_options& opts) {
    auto cfg = load_hf_config(dir);
    if (!cfg) return cfg.error();
    auto shards = plan_shards(*cfg, opts.tensor_parallel);
    if (!shards) return shards.error();
    auto m = std::make_unique<impl>(std::clamp(opts.threads, 1, 256));
    auto ck = checkpoint::load(dir, opts.io, &m->report);
    if (!ck) return ck.error();
    m->cfg = std::move(*cfg);
    m->weights = std::move(*ck);
    m->tp = opts.tensor_parallel;
    m->arith = opts.arith;
    m->v_cache = opts.v_cache;
    m->shards = std::move(*shards);
    if (auto r = bind_weights(*m); !r) return r.error();
    if (auto r = check_block_slices(*m); !r) return r.error();
    pin_q8_panels(*m);
    m->shape = make_shape(m->cfg, m->weights.total_bytes());
    return std::unique_ptr<transformer>(new transformer(std::move(m)));
}

result<std::unique_ptr<causal_lm>> load_causal_lm(const std::filesystem::path& dir, const load_options& opts) {
    auto t = transformer::load(dir, opts);
    if (!t) return t.error();
    return std::unique_ptr<causal_lm>(std::move(*t));
}

const model_shape& transformer::shape() const { return impl_->shape; }
const hf_config& transformer::config() const { return impl_->cfg; }
int transformer::tensor_parallel() const { return impl_->tp; }
arithmetic transformer::arithmetic_mode() const { return impl_->arith; }
v_cache_dtype transformer::v_cache() const { return impl_->v_cache; }
const io::read_report& transformer::load_report() const { return impl_->report; }
void transformer::record_routing(routing_counts* sink) { impl_->routing = sink; }

std::int64_t transformer::sequence_length(seq_id seq) const {
    auto it = impl_->seqs.find(seq);
    return it == impl_->seqs.end() ? 0 : it->second.length;
}

void_result transformer::copy_prefix(seq_id src, seq_id dst, std::int64_t tokens) {
    auto from = impl_->seqs.find(src);
    if (from == impl_->seqs.end() || tokens < 0 || tokens > from->second.length)
        return make_error(status::invalid_argument, "copy_prefix: sequence " + std::to_string(src) + " holds fewer than " +
                                                        std::to_string(tokens) + " positions");
    if (src == dst) return make_error(status::invalid_argument, "copy_prefix: source and destination are one sequence");
    if (sequence_length(dst) != 0)
        return make_error(status::invalid_argument, "copy_prefix: sequence " + std::to_string(dst) + " is not empty");
    sequence_state copy;
    copy.kv.copy_prefix(from->second.kv, tokens);
    copy.length = tokens;
    impl_->seqs[dst] = std::move(copy);
    return {};
}

void_result transformer::truncate(seq_id seq, std::int64_t tokens) {
    auto it = impl_->seqs.find(seq);
    const std::int64_t length = it == impl_->seqs.end() ? 0 : it->second.length;
    if (tokens < 0 || tokens > length)
        return make_error(status::invalid_argument, "truncate: sequence " + std::to_string(seq) + " holds " +
                                                        std::to_string(length) + " positions, not " + std::to_string(tokens));
    if (it == impl_->seqs.end()) return {};
    it->second.kv.truncate(tokens);
    it->second.length = tokens;
    return {};
}

void transformer::free_sequence(seq_id seq) { impl_->seqs.erase(seq); }
void transformer::free_all() { impl_->seqs.clear(); }

}  // namespace calserve::model
