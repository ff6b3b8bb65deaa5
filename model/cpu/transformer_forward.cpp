// The forward pass: embedding, layers (attention + dense/MoE FFN), final norm, LM head.
#include <cmath>
#include <vector>

#include "model/cpu/transformer_internal.hpp"

namespace calserve::model {
namespace {

void ensure(simd_vector<float>& v, std::int64_t n) {
    if (v.size() < static_cast<std::size_t>(n)) v.resize(static_cast<std::size_t>(n));
}

void add_into(float* x, const float* part, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) x[i] += part[i];
}

}  // namespace

// The per-row steps between the products (norms, RoPE, the KV stores, SiLU, the
// residual adds) are independent across rows, so a prefill's rows are split across
// the pool: with them on the calling thread alone, the other thread waited through
// them (each row's numbers are the same whichever thread computes it). `per_row`
// estimates a row's cost for the pool's inline threshold: a decode batch runs inline.
template <class Fn>
void transformer::impl::each_row(std::int64_t t, std::int64_t per_row, Fn&& fn) {
    pool.parallel_for(t, 1, t * per_row, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) fn(i);
    });
}

void transformer::impl::lin(const tensor_view& w, const float* x, std::int64_t t, std::int64_t ldx, float* y,
                            std::int64_t ldy) {
    linear(pool, w, x, t, ldx, y, ldy, mode, arith);
}

void transformer::impl::forward(std::span<const row_ref> rows, std::span<const std::int64_t> logit_rows,
                                float* logits, linear_mode how) {
    mode = how;
    const auto t = static_cast<std::int64_t>(rows.size());
    const std::int64_t h = cfg.hidden_size, half = cfg.head_dim / 2;
    ensure(ws.x, t * h);
    ensure(ws.xn, t * h);
    ensure(ws.rope_cos, t * half);
    ensure(ws.rope_sin, t * half);
    for (std::int64_t i = 0; i < t; ++i) {
        row_to_f32(embed, rows[static_cast<std::size_t>(i)].token, ws.x.data() + i * h);
        const auto pos = static_cast<float>(rows[static_cast<std::size_t>(i)].pos);
        for (std::int64_t j = 0; j < half; ++j) {
            const float angle = pos * inv_freq[static_cast<std::size_t>(j)];  // FP32 product, as HF does
            ws.rope_cos[static_cast<std::size_t>(i * half + j)] = std::cos(angle);
            ws.rope_sin[static_cast<std::size_t>(i * half + j)] = std::sin(angle);
        }
    }
    for (std::int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
        const layer_weights& lw = layers[static_cast<std::size_t>(l)];
        attention_block(lw, l, rows);
        each_row(t, h * 8, [&](std::int64_t i) {
            rmsnorm(ws.x.data() + i * h, lw.post_norm.data(), h, static_cast<float>(cfg.rms_norm_eps), ws.xn.data() + i * h);
        });
        if (lw.moe) moe_block(lw, l, t);
        else dense_block(lw, t);
    }
    const auto n = static_cast<std::int64_t>(logit_rows.size());
    ensure(ws.final_rows, n * h);
    for (std::int64_t j = 0; j < n; ++j)
        rmsnorm(ws.x.data() + logit_rows[static_cast<std::size_t>(j)] * h, final_norm.data(), h,
                static_cast<float>(cfg.rms_norm_eps), ws.final_rows.data() + j * h);
    if (!lm_panels.empty())
        linear_panels(pool, lm_panels, ws.final_rows.data(), n, h, logits, cfg.vocab_size);
    else
        lin(lm_head, ws.final_rows.data(), n, h, logits, cfg.vocab_size);
}

void transformer::impl::attention_block(const layer_weights& lw, std::int64_t layer, std::span<const row_ref> rows) {
    const auto t = static_cast<std::int64_t>(rows.size());
    const std::int64_t h = cfg.hidden_size, hd = cfg.head_dim, qd = q_dim(), kvd = kv_dim();
    const auto eps = static_cast<float>(cfg.rms_norm_eps);
    each_row(t, h * 8, [&](std::int64_t i) {
        rmsnorm(ws.x.data() + i * h, lw.input_norm.data(), h, eps, ws.xn.data() + i * h);
    });
    ensure(ws.q, t * qd);
    ensure(ws.k, t * kvd);
    ensure(ws.v, t * kvd);
    ensure(ws.attn, t * qd);
    ensure(ws.part, t * h);
    for (const shard_range& s : shards) {
        const std::int64_t q0 = s.head_begin * hd, q1 = s.head_end * hd, k0 = s.kv_begin * hd, k1 = s.kv_end * hd;
        const linear_output qkv[] = {{lw.q.row_slice(q0, q1), ws.q.data() + q0, qd},
                                     {lw.k.row_slice(k0, k1), ws.k.data() + k0, kvd},
                                     {lw.v.row_slice(k0, k1), ws.v.data() + k0, kvd}};
        linear_fused(pool, qkv, ws.xn.data(), t, h, mode, arith);
        each_row(t, (s.head_end - s.head_begin + s.kv_end - s.kv_begin) * hd * 4, [&](std::int64_t i) {
            const float* cs = ws.rope_cos.data() + i * (hd / 2);
            const float* sn = ws.rope_sin.data() + i * (hd / 2);
            for (std::int64_t hh = s.head_begin; hh < s.head_end; ++hh) {
                float* qv = ws.q.data() + i * qd + hh * hd;
                rmsnorm(qv, lw.q_norm.data(), hd, eps, qv);
                rope_rotate_half(qv, cs, sn, hd);
            }
            const row_ref& r = rows[static_cast<std::size_t>(i)];
            for (std::int64_t kh = s.kv_begin; kh < s.kv_end; ++kh) {
                float* kv = ws.k.data() + i * kvd + kh * hd;
                rmsnorm(kv, lw.k_norm.data(), hd, eps, kv);
                rope_rotate_half(kv, cs, sn, hd);
                r.seq->kv.store(layer, r.pos, kh, kv, ws.v.data() + i * kvd + kh * hd);
            }
        });
        attend(s, layer, rows);
        lin(lw.o.col_slice(q0, q1), ws.attn.data() + q0, t, qd, ws.part.data(), h);
        each_row(t, h * 8, [&](std::int64_t i) { add_into(ws.x.data() + i * h, ws.part.data() + i * h, h); });
    }
}

// Causal grouped-query attention for the shard's heads: row i sees positions [0, pos_i] of its sequence.
void transformer::impl::attend(const shard_range& s, std::int64_t layer, std::span<const row_ref> rows) {
    std::vector<attention_row> ar(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) ar[i] = {&rows[i].seq->kv, rows[i].pos};
    attention_args a;
    a.layer = layer;
    a.kv_begin = s.kv_begin;
    a.kv_end = s.kv_end;
    a.group = cfg.num_attention_heads / cfg.num_key_value_heads;
    a.q = ws.q.data();
    a.ldq = q_dim();
    a.out = ws.attn.data();
    a.ldo = q_dim();
    a.arith = arith;
    attend_causal(pool, a, ar);
}

void transformer::impl::dense_block(const layer_weights& lw, std::int64_t t) {
    const std::int64_t h = cfg.hidden_size;
    for (const shard_range& s : shards) {
        const std::int64_t f = s.ffn_end - s.ffn_begin;
        ensure(ws.gate, t * f);
        ensure(ws.up, t * f);
        const linear_output gate_up[] = {{lw.gate.row_slice(s.ffn_begin, s.ffn_end), ws.gate.data(), f},
                                         {lw.up.row_slice(s.ffn_begin, s.ffn_end), ws.up.data(), f}};
        linear_fused(pool, gate_up, ws.xn.data(), t, h, mode, arith);
        each_row(t, f * 4, [&](std::int64_t i) { silu_mul(ws.gate.data() + i * f, ws.up.data() + i * f, f); });
        lin(lw.down.col_slice(s.ffn_begin, s.ffn_end), ws.gate.data(), t, f, ws.part.data(), h);
        each_row(t, h * 8, [&](std::int64_t i) { add_into(ws.x.data() + i * h, ws.part.data() + i * h, h); });
    }
}

// Runs one expert's MLP (shard columns) on the n rows gathered in ws.expert_in; result in ws.part.
void transformer::impl::expert_mlp(const expert_weights& ew, const shard_range& s, std::int64_t n) {
    const std::int64_t h = cfg.hidden_size, f = s.moe_end - s.moe_begin;
    ensure(ws.gate, n * f);
    ensure(ws.up, n * f);
    lin(ew.gate.row_slice(s.moe_begin, s.moe_end), ws.expert_in.data(), n, h, ws.gate.data(), f);
    lin(ew.up.row_slice(s.moe_begin, s.moe_end), ws.expert_in.data(), n, h, ws.up.data(), f);
    silu_mul(ws.gate.data(), ws.up.data(), n * f);
    lin(ew.down.col_slice(s.moe_begin, s.moe_end), ws.gate.data(), n, f, ws.part.data(), h);
}

namespace {
void record_routed(routing_counts& sink, std::int64_t layer, std::int64_t t,
                   const std::vector<std::vector<std::pair<std::int64_t, float>>>& routed) {
    std::vector<std::uint64_t> rows(routed.size());
    for (std::size_t e = 0; e < routed.size(); ++e) rows[e] = routed[e].size();
    sink.add(static_cast<std::size_t>(layer), static_cast<std::uint64_t>(t), rows);
}
}  // namespace

void transformer::impl::moe_block(const layer_weights& lw, std::int64_t layer, std::int64_t t) {
    const std::int64_t h = cfg.hidden_size, ne = cfg.num_experts;
    ensure(ws.router, t * ne);
    lin(lw.router, ws.xn.data(), t, h, ws.router.data(), ne);
    // Per expert: the rows routed to it and their routing weights.
    std::vector<std::vector<std::pair<std::int64_t, float>>> routed(static_cast<std::size_t>(ne));
    for (std::int64_t i = 0; i < t; ++i) {
        auto chosen = select_experts(std::span(ws.router.data() + i * ne, static_cast<std::size_t>(ne)),
                                     cfg.num_experts_per_tok, cfg.norm_topk_prob);
        for (const auto& c : chosen) routed[static_cast<std::size_t>(c.expert)].push_back({i, c.weight});
    }
    if (routing) record_routed(*routing, layer, t, routed);
    ensure(ws.part, t * h);
    for (std::int64_t e = 0; e < ne; ++e) {
        const auto& list = routed[static_cast<std::size_t>(e)];
        if (list.empty()) continue;
        const auto n = static_cast<std::int64_t>(list.size());
        ensure(ws.expert_in, n * h);
        for (std::int64_t j = 0; j < n; ++j)
            std::copy_n(ws.xn.data() + list[static_cast<std::size_t>(j)].first * h, h, ws.expert_in.data() + j * h);
        for (const shard_range& s : shards) {
            expert_mlp(lw.experts[static_cast<std::size_t>(e)], s, n);
            for (std::int64_t j = 0; j < n; ++j) {
                const auto& [row, w] = list[static_cast<std::size_t>(j)];
                axpy_f32(w, ws.part.data() + j * h, ws.x.data() + row * h, h);
            }
        }
    }
}

}  // namespace calserve::model
