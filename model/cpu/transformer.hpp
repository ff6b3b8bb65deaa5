#pragma once
//! The reference Qwen3 / Qwen3-MoE transformer on the CPU (implements causal_lm).
//!
//! Role: the numbers behind the simulated NPU and the `cpu` backend. It loads a
//! Hugging Face directory (config.json + safetensors, weights kept in their
//! stored dtype) and computes embedding -> N x [RMSNorm, attention with per-head
//! q/k RMSNorm, rotate-half RoPE and grouped-query causal softmax, residual,
//! RMSNorm, SwiGLU MLP or top-k MoE, residual] -> final RMSNorm -> LM head.
//! Decode uses threaded AVX2/AVX-512 matvecs, batches and prefill a read-once
//! multi-vector kernel (row-exact), `prefill_all` OpenBLAS sgemm over converted
//! tiles; in the bf16 arithmetic mode every product with BF16 weights runs the
//! register-blocked `vdpbf16ps` kernel (kernels.hpp, `arithmetic`).
//!
//! Tensor parallel: with `tensor_parallel = 2` every layer runs as two shards
//! ("chips"): each owns half the attention heads (and their KV heads) and half
//! the FFN columns (per expert for MoE); the shards' partial o_proj / down_proj
//! outputs are summed into the residual. The result equals the unsplit model up
//! to FP32 summation order.
//!
//! Fault model: bad input (unknown sequence, token outside the vocabulary, empty
//! prompt, context past max_position_embeddings, a sequence twice in one batch)
//! is a `result` error and leaves every sequence unchanged. Invariants: a
//! sequence's KV cache holds exactly `sequence_length` positions; calls are not
//! thread-safe (the device layer serialises them).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>

#include "config/result.hpp"
#include "io/file_reader.hpp"
#include "model/core/causal_lm.hpp"
#include "model/core/routing_counts.hpp"
#include "model/cpu/attention.hpp"
#include "model/cpu/kernels.hpp"
#include "model/weights/hf_config.hpp"

namespace calserve::model {

struct load_options {
    int threads = 2;          // compute threads (the caller's thread included)
    int tensor_parallel = 1;  // 1 or 2
    io::read_options io;      // weight file reading (io_uring or pread)
    // Dot products with BF16 weights: exact FP32, or BF16 inputs with FP32 accumulation
    // (kernels.hpp, `arithmetic`). Both keep every exactness guarantee of this class.
    arithmetic arith = arithmetic::fp32;
    // How the KV cache stores values (attention.hpp): BF16, or S8 with one FP32 scale per
    // (page, KV head, position), quantised on write and dequantised inside the attention
    // kernel. Keys stay BF16. Both keep every exactness guarantee of this class.
    v_cache_dtype v_cache = v_cache_dtype::bf16;
};

// Experts chosen for one token: softmax over router logits, top-k with ties going
// to the lowest expert index, optionally renormalised to sum 1.
struct expert_choice {
    std::int32_t expert = 0;
    float weight = 0.0f;
};
std::vector<expert_choice> select_experts(std::span<const float> router_logits, std::int64_t k, bool renormalise);

class transformer final : public causal_lm {
public:
    static result<std::unique_ptr<transformer>> load(const std::filesystem::path& dir, const load_options& opts);
    ~transformer() override;

    const model_shape& shape() const override;
    const hf_config& config() const;
    int tensor_parallel() const;
    arithmetic arithmetic_mode() const;
    v_cache_dtype v_cache() const;
    const io::read_report& load_report() const;
    // Routing counts (model/core/routing_counts.hpp): while `sink` is set, every MoE
    // layer of every forward pass adds its rows per expert to it (`sink` sized by
    // make_routing_counts for this model). nullptr (the default) records nothing; off,
    // the forward pass pays one pointer test per MoE layer. The caller owns `sink`.
    void record_routing(routing_counts* sink);

    void_result prefill(seq_id seq, std::span<const token_id> tokens, std::span<float> logits) override;
    void_result decode(seq_id seq, token_id token, std::span<float> logits) override;
    void_result decode_batch(std::span<const seq_id> seqs, std::span<const token_id> tokens,
                             std::span<float> logits) override;
    // One forward pass over every position of every run (row-exact: transformer_verify.cpp).
    void_result decode_runs(std::span<const seq_id> seqs, std::span<const std::int64_t> counts,
                            std::span<const token_id> tokens, std::span<float> logits) override;
    // Every new position's logits in one row-exact pass (transformer_step.cpp).
    void_result prefill_scored(seq_id seq, std::span<const token_id> tokens, std::span<float> logits) override;
    // Like prefill, but writes the logits of every new position (tokens.size() x vocab).
    void_result prefill_all(seq_id seq, std::span<const token_id> tokens, std::span<float> logits);
    std::int64_t sequence_length(seq_id seq) const override;
    void_result copy_prefix(seq_id src, seq_id dst, std::int64_t tokens) override;
    void_result truncate(seq_id seq, std::int64_t tokens) override;
    void free_sequence(seq_id seq) override;
    void free_all() override;

    struct impl;

private:
    explicit transformer(std::unique_ptr<impl> p);
    // prefill (the last row's logits) and prefill_scored (every row's), one pass.
    void_result prefill_rows(seq_id seq, std::span<const token_id> tokens, std::span<float> logits, bool every_row);
    std::unique_ptr<impl> impl_;
};

result<std::unique_ptr<causal_lm>> load_causal_lm(const std::filesystem::path& dir, const load_options& opts = {});

}  // namespace calserve::model
