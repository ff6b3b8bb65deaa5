#pragma once
//! The contract between the reference transformer (model/) and its users: the
//! simulated NPU (device/sim), the `cpu` backend and the runner/reference tools.
//!
//! A causal LM holds per-sequence KV state keyed by `seq_id`. `prefill` appends a
//! run of tokens to a sequence (creating it when new) and returns the logits of
//! the last token; `decode` appends one token. Logits are FP32 of length
//! `shape().vocab_size`. Calls are not thread-safe on one object unless stated;
//! the device layer serialises them. Failures are `result` errors, never aborts.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "config/result.hpp"

namespace calserve::model {

using seq_id = std::uint64_t;
using token_id = std::int32_t;

struct model_shape {
    std::string architecture;        // "Qwen3ForCausalLM" or "Qwen3MoeForCausalLM"
    std::int64_t vocab_size = 0;
    std::int64_t hidden_size = 0;
    std::int64_t num_layers = 0;
    std::int64_t num_heads = 0;
    std::int64_t num_kv_heads = 0;
    std::int64_t head_dim = 0;
    std::int64_t intermediate_size = 0;
    std::int64_t max_context = 0;    // max_position_embeddings
    std::int64_t num_experts = 0;    // 0 for dense
    std::int64_t experts_per_token = 0;
    std::int64_t weight_bytes = 0;   // bytes of all parameters as stored
    std::int64_t eos_token_id = -1;
};

class causal_lm {
public:
    virtual ~causal_lm() = default;
    virtual const model_shape& shape() const = 0;
    // Appends `tokens` (non-empty) to `seq` and writes the last token's logits.
    virtual void_result prefill(seq_id seq, std::span<const token_id> tokens, std::span<float> logits) = 0;
    // Appends one token to an existing sequence and writes its logits.
    virtual void_result decode(seq_id seq, token_id token, std::span<float> logits) = 0;
    // One decode step for several distinct sequences; row i of `logits`
    // (vocab_size floats each) belongs to seqs[i]. The default runs them one by one;
    // implementations override it to read the weights once for the whole batch.
    virtual void_result decode_batch(std::span<const seq_id> seqs, std::span<const token_id> tokens,
                                     std::span<float> logits) {
        if (seqs.size() != tokens.size() || logits.size() != seqs.size() * static_cast<std::size_t>(shape().vocab_size))
            return make_error(status::invalid_argument, "decode_batch: sizes of seqs, tokens and logits disagree");
        const auto vocab = static_cast<std::size_t>(shape().vocab_size);
        for (std::size_t i = 0; i < seqs.size(); ++i)
            if (auto r = decode(seqs[i], tokens[i], logits.subspan(i * vocab, vocab)); !r) return r;
        return {};
    }
    // A verify step (speculative decoding): appends counts[i] >= 1 tokens to seqs[i]
    // (distinct, known) and writes the logits of every new position, sequence by sequence
    // (sum(counts) x vocab_size floats). Position j of a run gets exactly the logits that
    // decoding the run's tokens one at a time would give. The default does that;
    // implementations override it to read the weights once for all the positions.
    virtual void_result decode_runs(std::span<const seq_id> seqs, std::span<const std::int64_t> counts,
                                    std::span<const token_id> tokens, std::span<float> logits) {
        const auto vocab = static_cast<std::size_t>(shape().vocab_size);
        std::size_t total = 0;
        for (auto c : counts) total += c > 0 ? static_cast<std::size_t>(c) : 0;
        if (seqs.size() != counts.size() || tokens.size() != total || logits.size() != total * vocab)
            return make_error(status::invalid_argument, "decode_runs: sizes of seqs, counts, tokens and logits disagree");
        std::size_t at = 0;
        for (std::size_t i = 0; i < seqs.size(); ++i) {
            if (counts[i] < 1) return make_error(status::invalid_argument, "decode_runs: a run needs a token");
            for (std::int64_t j = 0; j < counts[i]; ++j, ++at)
                if (auto r = decode(seqs[i], tokens[at], logits.subspan(at * vocab, vocab)); !r) return r;
        }
        return {};
    }
    // A scoring prefill: appends `tokens` (non-empty) to `seq` (creating it when new), as
    // prefill does, and writes the logits of every new position (tokens.size() x
    // vocab_size floats), position j's exactly what decoding tokens[0..j] one at a time
    // would give, so a prompt token's score equals the logprob it gets when generated.
    // The default does that; implementations override it to read the weights once.
    virtual void_result prefill_scored(seq_id seq, std::span<const token_id> tokens, std::span<float> logits) {
        const auto vocab = static_cast<std::size_t>(shape().vocab_size);
        if (tokens.empty() || logits.size() < tokens.size() * vocab)
            return make_error(status::invalid_argument, "prefill_scored: no tokens, or logits smaller than tokens x vocabulary");
        if (auto r = prefill(seq, tokens.first(1), logits.first(vocab)); !r) return r;
        for (std::size_t j = 1; j < tokens.size(); ++j)
            if (auto r = decode(seq, tokens[j], logits.subspan(j * vocab, vocab)); !r) return r;
        return {};
    }
    // Number of tokens cached for `seq` (0 if unknown).
    virtual std::int64_t sequence_length(seq_id seq) const = 0;
    // Seq copy: `dst` (unknown or empty) receives the first `tokens` positions of
    // `src`'s KV state, bit for bit, so appending to `dst` computes exactly what a
    // prefill of those tokens would have left. `src` is unchanged.
    virtual void_result copy_prefix(seq_id src, seq_id dst, std::int64_t tokens) {
        (void)src, (void)dst, (void)tokens;
        return make_error(status::unsupported, "this model cannot copy KV between sequences");
    }
    // Seq keep: `seq` keeps its first `tokens` positions (<= its length) and forgets the rest.
    virtual void_result truncate(seq_id seq, std::int64_t tokens) {
        (void)seq, (void)tokens;
        return make_error(status::unsupported, "this model cannot truncate a sequence's KV");
    }
    // Drops a sequence's KV state; unknown ids are ignored.
    virtual void free_sequence(seq_id seq) = 0;
    virtual void free_all() = 0;
};

}  // namespace calserve::model
