// decode_runs: the verify step of speculative decoding as one forward pass (transformer.hpp).
// Every position of every run is a row of one row-exact pass: the weights are read once
// for all of them, and each row's numbers are those it gets decoded alone (batch
// invariance, docs/model.md), so position j of a run equals the j-th of as many decode steps.
#include <set>

#include "model/cpu/transformer_internal.hpp"

namespace calserve::model {

void_result transformer::decode_runs(std::span<const seq_id> seqs, std::span<const std::int64_t> counts,
                                     std::span<const token_id> tokens, std::span<float> logits) {
    impl& m = *impl_;
    const auto vocab = static_cast<std::size_t>(m.cfg.vocab_size);
    std::size_t total = 0;
    for (auto c : counts) {
        if (c < 1) return make_error(status::invalid_argument, "decode_runs: a run needs a token");
        total += static_cast<std::size_t>(c);
    }
    if (seqs.empty() || seqs.size() != counts.size() || tokens.size() != total)
        return make_error(status::invalid_argument, "decode_runs: sizes of seqs, counts and tokens disagree");
    if (logits.size() < total * vocab)
        return make_error(status::invalid_argument, "decode_runs: logits buffer smaller than positions x vocabulary");
    for (auto t : tokens)
        if (t < 0 || t >= m.cfg.vocab_size)
            return make_error(status::invalid_argument, "token " + std::to_string(t) + " outside the vocabulary");
    if (std::set<seq_id>(seqs.begin(), seqs.end()).size() != seqs.size())
        return make_error(status::invalid_argument, "decode_runs: a sequence appears twice");
    std::vector<sequence_state*> states;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
        auto it = m.seqs.find(seqs[i]);
        if (it == m.seqs.end())
            return make_error(status::unknown_sequence, "decode: unknown sequence " + std::to_string(seqs[i]));
        if (it->second.length + counts[i] > m.cfg.max_position_embeddings)
            return make_error(status::context_overflow, "decode_runs: run past max_position_embeddings");
        states.push_back(&it->second);
    }
    std::vector<row_ref> rows;
    std::vector<std::int64_t> all;
    std::size_t at = 0;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
        sequence_state& s = *states[i];
        s.kv.reserve(m.cfg.num_hidden_layers, m.cfg.num_key_value_heads, m.cfg.head_dim, s.length + counts[i], m.v_cache);
        for (std::int64_t j = 0; j < counts[i]; ++j, ++at) {
            rows.push_back({&s, s.length + j, tokens[at]});
            all.push_back(static_cast<std::int64_t>(at));
        }
    }
    m.forward(rows, all, logits.data(), linear_mode::row_exact);
    for (std::size_t i = 0; i < seqs.size(); ++i) states[i]->length += counts[i];
    return {};
}

}  // namespace calserve::model
