// prefill / decode / decode_batch: input validation, KV sizing, then forward(); see transformer.hpp.
#include <algorithm>
#include <set>

#include "model/cpu/transformer_internal.hpp"

namespace calserve::model {
namespace {

void_result check_tokens(const hf_config& c, std::span<const token_id> tokens) {
    for (auto t : tokens)
        if (t < 0 || t >= c.vocab_size)
            return make_error(status::invalid_argument,
                              "token " + std::to_string(t) + " outside the vocabulary of " + std::to_string(c.vocab_size));
    return {};
}

void_result check_room(const hf_config& c, std::int64_t length, std::int64_t more) {
    if (length + more > c.max_position_embeddings)
        return make_error(status::context_overflow, std::to_string(length) + " cached + " + std::to_string(more) +
                                                        " new tokens exceed max_position_embeddings " +
                                                        std::to_string(c.max_position_embeddings));
    return {};
}

void grow(const transformer::impl& m, sequence_state& s, std::int64_t new_length) {
    const hf_config& c = m.cfg;
    s.kv.reserve(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, new_length, m.v_cache);
}

}  // namespace

void_result transformer::prefill(seq_id seq, std::span<const token_id> tokens, std::span<float> logits) {
    if (logits.size() < static_cast<std::size_t>(impl_->cfg.vocab_size))
        return make_error(status::invalid_argument, "prefill: logits buffer smaller than the vocabulary");
    return prefill_rows(seq, tokens, logits, false);
}

// A scoring prefill is the serving prefill with every row's logits kept: the same
// row-exact pass (so the same KV, and each row the bits decoding it alone gives).
void_result transformer::prefill_scored(seq_id seq, std::span<const token_id> tokens, std::span<float> logits) {
    if (logits.size() < tokens.size() * static_cast<std::size_t>(impl_->cfg.vocab_size))
        return make_error(status::invalid_argument, "prefill_scored: logits buffer smaller than tokens x vocabulary");
    return prefill_rows(seq, tokens, logits, true);
}

void_result transformer::prefill_rows(seq_id seq, std::span<const token_id> tokens, std::span<float> logits,
                                      bool every_row) {
    impl& m = *impl_;
    if (tokens.empty()) return make_error(status::invalid_argument, "prefill: no tokens");
    if (auto r = check_tokens(m.cfg, tokens); !r) return r;
    auto it = m.seqs.find(seq);
    const std::int64_t length = it == m.seqs.end() ? 0 : it->second.length;
    const auto n = static_cast<std::int64_t>(tokens.size());
    if (auto r = check_room(m.cfg, length, n); !r) return r;
    sequence_state& s = m.seqs[seq];
    grow(m, s, length + n);
    std::vector<row_ref> rows;
    for (std::int64_t i = 0; i < n; ++i) rows.push_back({&s, length + i, tokens[static_cast<std::size_t>(i)]});
    std::vector<std::int64_t> out_rows;
    for (std::int64_t i = every_row ? 0 : n - 1; i < n; ++i) out_rows.push_back(i);
    m.forward(rows, out_rows, logits.data(), linear_mode::row_exact);
    s.length = length + n;
    return {};
}

void_result transformer::prefill_all(seq_id seq, std::span<const token_id> tokens, std::span<float> logits) {
    impl& m = *impl_;
    const auto n = static_cast<std::int64_t>(tokens.size());
    if (tokens.empty()) return make_error(status::invalid_argument, "prefill: no tokens");
    if (logits.size() < static_cast<std::size_t>(n * m.cfg.vocab_size))
        return make_error(status::invalid_argument, "prefill_all: logits buffer smaller than tokens x vocabulary");
    if (auto r = check_tokens(m.cfg, tokens); !r) return r;
    auto it = m.seqs.find(seq);
    const std::int64_t length = it == m.seqs.end() ? 0 : it->second.length;
    if (auto r = check_room(m.cfg, length, n); !r) return r;
    sequence_state& s = m.seqs[seq];
    grow(m, s, length + n);
    std::vector<row_ref> rows;
    std::vector<std::int64_t> all;
    for (std::int64_t i = 0; i < n; ++i) {
        rows.push_back({&s, length + i, tokens[static_cast<std::size_t>(i)]});
        all.push_back(i);
    }
    m.forward(rows, all, logits.data());
    s.length = length + n;
    return {};
}

void_result transformer::decode(seq_id seq, token_id token, std::span<float> logits) {
    return decode_batch(std::span(&seq, 1), std::span(&token, 1), logits);
}

void_result transformer::decode_batch(std::span<const seq_id> seqs, std::span<const token_id> tokens,
                                      std::span<float> logits) {
    impl& m = *impl_;
    const auto n = static_cast<std::int64_t>(seqs.size());
    if (seqs.empty() || tokens.size() != seqs.size())
        return make_error(status::invalid_argument, "decode: need one token per sequence");
    if (logits.size() < static_cast<std::size_t>(n * m.cfg.vocab_size))
        return make_error(status::invalid_argument, "decode: logits buffer smaller than sequences x vocabulary");
    if (auto r = check_tokens(m.cfg, tokens); !r) return r;
    if (std::set<seq_id>(seqs.begin(), seqs.end()).size() != seqs.size())
        return make_error(status::invalid_argument, "decode_batch: a sequence appears twice");
    std::vector<sequence_state*> states;
    for (auto id : seqs) {
        auto it = m.seqs.find(id);
        if (it == m.seqs.end()) return make_error(status::unknown_sequence, "decode: unknown sequence " + std::to_string(id));
        if (auto r = check_room(m.cfg, it->second.length, 1); !r) return r;
        states.push_back(&it->second);
    }
    std::vector<row_ref> rows;
    std::vector<std::int64_t> all;
    for (std::int64_t i = 0; i < n; ++i) {
        sequence_state& s = *states[static_cast<std::size_t>(i)];
        grow(m, s, s.length + 1);
        rows.push_back({&s, s.length, tokens[static_cast<std::size_t>(i)]});
        all.push_back(i);
    }
    m.forward(rows, all, logits.data(), linear_mode::row_exact);
    for (auto* s : states) ++s->length;
    return {};
}

}  // namespace calserve::model
