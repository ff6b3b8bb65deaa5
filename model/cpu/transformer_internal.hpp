#pragma once
//! Private state of model::transformer, shared by its translation units.
//! Invariants: every tensor_view points into `weights`; shard ranges partition
//! the heads, KV heads and FFN columns; a sequence_state's KV cache holds at
//! least `length` positions of every layer.
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "model/core/aligned.hpp"
#include "model/cpu/attention.hpp"
#include "model/cpu/kernels.hpp"
#include "model/core/thread_pool.hpp"
#include "model/cpu/transformer.hpp"
#include "model/weights/weights.hpp"

namespace calserve::model {

struct expert_weights {
    tensor_view gate, up, down;
};

struct layer_weights {
    std::vector<float> input_norm, post_norm, q_norm, k_norm;
    tensor_view q, k, v, o;
    bool moe = false;
    tensor_view gate, up, down;  // dense MLP
    tensor_view router;          // MoE: [num_experts, hidden]
    std::vector<expert_weights> experts;
};

// What one "chip" owns under tensor parallelism.
struct shard_range {
    std::int64_t head_begin = 0, head_end = 0;
    std::int64_t kv_begin = 0, kv_end = 0;
    std::int64_t ffn_begin = 0, ffn_end = 0;  // dense intermediate columns
    std::int64_t moe_begin = 0, moe_end = 0;  // per-expert intermediate columns
};

struct sequence_state {
    std::int64_t length = 0;
    kv_cache kv;
};

// One token being computed: its sequence, position and id.
struct row_ref {
    sequence_state* seq = nullptr;
    std::int64_t pos = 0;
    token_id token = 0;
};

// Scratch buffers reused across calls (grown, never shrunk).
struct workspace {
    simd_vector<float> x, xn, q, k, v, attn, part, gate, up, router, rope_cos, rope_sin, expert_in, final_rows;
};

struct transformer::impl {
    hf_config cfg;
    model_shape shape;
    checkpoint weights;
    io::read_report report;
    thread_pool pool;
    int tp = 1;
    std::vector<shard_range> shards;
    tensor_view embed, lm_head;
    panel_matrix lm_panels;  // lm_head repacked when its rows are short (tiny models); else empty
    std::vector<std::shared_ptr<const void>> q8_pins;  // Q8_0 matrices interleaved once for the VNNI kernel
    std::vector<float> final_norm;
    std::vector<layer_weights> layers;
    std::vector<float> inv_freq;
    std::map<seq_id, sequence_state> seqs;
    workspace ws;
    linear_mode mode = linear_mode::fastest;  // of the forward pass running
    arithmetic arith = arithmetic::fp32;       // fixed at load
    v_cache_dtype v_cache = v_cache_dtype::bf16;  // fixed at load
    routing_counts* routing = nullptr;  // record_routing's sink; nullptr: off

    impl(int threads) : pool(threads) {}

    std::int64_t q_dim() const { return cfg.num_attention_heads * cfg.head_dim; }
    std::int64_t kv_dim() const { return cfg.num_key_value_heads * cfg.head_dim; }

    // Runs the model over `rows` (KV caches already sized) and writes the logits
    // of rows listed in `logit_rows` to consecutive vocab-sized slots of `logits`.
    // `how` = row_exact (decode batches): every row's numbers equal that row run
    // alone, bit for bit; every other step (norms, attention, MoE routing and the
    // per-row expert sums in expert order) is per row already.
    void forward(std::span<const row_ref> rows, std::span<const std::int64_t> logit_rows, float* logits,
                 linear_mode how = linear_mode::fastest);
    void lin(const tensor_view& w, const float* x, std::int64_t t, std::int64_t ldx, float* y, std::int64_t ldy);
    // fn(i) for rows i < t, split across the pool when t x per_row is large (prefill).
    template <class Fn>
    void each_row(std::int64_t t, std::int64_t per_row, Fn&& fn);
    void attention_block(const layer_weights& lw, std::int64_t layer, std::span<const row_ref> rows);
    void attend(const shard_range& s, std::int64_t layer, std::span<const row_ref> rows);
    void dense_block(const layer_weights& lw, std::int64_t t);
    void moe_block(const layer_weights& lw, std::int64_t layer, std::int64_t t);
    void expert_mlp(const expert_weights& ew, const shard_range& s, std::int64_t n);
};

}  // namespace calserve::model
