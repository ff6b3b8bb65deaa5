// Simulated NPU: scoring prefills (device/scoring.hpp, docs/device.md "Scoring prefills").
// A prefill job that wrote "score_request" runs its chunk through the reference model's
// scoring prefill (every position's logits, each what decoding it would give), rounds
// each position's logits to BF16 as the device writes logits, and scores the positions
// the host asked for with the host sampler's own arithmetic (model::sampler::score).
// The chunk is computed in pieces of k_score_piece positions so a long chunk never holds
// more than that many rows of logits; the pieces append to the sequence in order, and a
// row-exact pass gives every row the same bits whatever the piece boundaries.
#include <algorithm>
#include <cstring>

#include "device/bf16.hpp"
#include "device/scoring.hpp"
#include "device/sim/sim_device.hpp"

namespace calserve::device::sim {

namespace {
constexpr std::size_t k_score_piece = 64;
constexpr auto k_top = static_cast<std::size_t>(k_score_top_max);

std::size_t input_at(const submodel_desc& sm, std::string_view name) {
    std::size_t k = 0;
    while (k < sm.inputs.size() && sm.inputs[k].name != name) ++k;
    return k;
}
}  // namespace

bool sim_device::wrote_score_request(const submodel_desc& sm, const buffer_set& b) const {
    const std::size_t k = input_at(sm, k_score_request);
    return sm.kind == submodel_kind::prefill && k < sm.inputs.size() && b.written[k];
}

// Every position's target in the vocabulary (or -1) and its top-N within [0, k_score_top_max].
void_result sim_device::validate_score_request(const submodel_desc& sm, const buffer_set& b) const {
    if (!wrote_score_request(sm, b)) return {};
    const auto& in = b.inputs[input_at(sm, k_score_request)];
    const auto n = static_cast<std::size_t>(tokens_of(sm, b));
    for (std::size_t p = 0; p < n; ++p) {
        std::int32_t v[2];
        std::memcpy(v, in.data() + p * sizeof v, sizeof v);
        if (v[0] < -1 || v[0] >= spec_.vocab_size || v[1] < 0 || v[1] > k_score_top_max)
            return make_error(status::invalid_argument, sm.name + "/" + std::string(k_score_request) + ": position " +
                                                            std::to_string(p) + " asks for token " + std::to_string(v[0]) +
                                                            " with " + std::to_string(v[1]) + " alternatives");
    }
    return {};
}

void sim_device::forget_score_request(const submodel_desc& sm, buffer_set& b) const {
    if (!wrote_score_request(sm, b)) return;
    const std::size_t k = input_at(sm, k_score_request);
    b.written[k] = false;
    const auto bytes = std::uint64_t(tokens_of(sm, b)) * 2 * sizeof(std::int32_t);  // as written at this slice
    b.written_bytes -= std::min(b.written_bytes, bytes);
}

void sim_device::take_score_inputs(job& j, const submodel_desc& sm, const buffer_set& b) const {
    if (!wrote_score_request(sm, b)) return;
    const auto& in = b.inputs[input_at(sm, k_score_request)];
    j.score_request.resize(static_cast<std::size_t>(j.row_tokens) * 2);
    std::memcpy(j.score_request.data(), in.data(), j.score_request.size() * sizeof(std::int32_t));
}

// The chunk's positions through the scoring prefill, piece by piece; `logits` ends with
// the last position's (the job's "logits" output, as a plain prefill's).
void_result sim_device::compute_scored(job& j, std::vector<float>& logits) {
    const auto vocab = static_cast<std::size_t>(model_->shape().vocab_size);
    const auto n = j.tokens.size();
    j.score_logprobs.assign(n, 0.0f);
    j.score_top_ids.assign(n * k_top, -1);
    j.score_top_logprobs.assign(n * k_top, 0.0f);
    std::vector<float> rows(std::min(n, k_score_piece) * vocab);
    std::vector<model::bf16> row16(vocab);
    for (std::size_t at = 0; at < n; at += k_score_piece) {
        const std::size_t len = std::min(k_score_piece, n - at);
        const auto piece = std::span(j.tokens).subspan(at, len);
        if (auto r = model_->prefill_scored(j.sequence, piece, std::span(rows).first(len * vocab)); !r) return r;
        // An injected NaN poisons the "logits" output (encode_logits): the host faults the job on it.
        for (std::size_t p = 0; p < len && !j.poison_logits; ++p) {
            const std::int32_t target = j.score_request[2 * (at + p)];
            const std::int32_t top_n = j.score_request[2 * (at + p) + 1];
            if (target < 0 && top_n == 0) continue;
            model::f32_to_bf16(std::span<const float>(rows.data() + p * vocab, vocab), row16);
            auto s = score_sampler_.score(row16, target, static_cast<std::size_t>(top_n));
            if (!s) return s.error();  // NaN/Inf from the model: the job fails as any compute error
            j.score_logprobs[at + p] = s->logprob;
            for (std::size_t t = 0; t < s->top_count; ++t) {
                j.score_top_ids[(at + p) * k_top + t] = s->top[t].token;
                j.score_top_logprobs[(at + p) * k_top + t] = s->top[t].logprob;
            }
        }
        if (at + len == n) std::copy_n(rows.data() + (len - 1) * vocab, vocab, logits.data());
    }
    return {};
}

void sim_device::write_score_outputs(const job& j, const submodel_desc& sm, buffer_set& b) const {
    for (std::size_t k = 0; k < sm.outputs.size(); ++k) {
        const auto& t = sm.outputs[k];
        const auto put = [&](const auto& v) {
            const std::size_t n = std::min<std::size_t>(b.outputs[k].size(), v.size() * sizeof(v[0]));
            if (n > 0) std::memcpy(b.outputs[k].data(), v.data(), n);
        };
        if (t.name == k_score_logprobs) put(j.score_logprobs);
        else if (t.name == k_score_top_ids) put(j.score_top_ids);
        else if (t.name == k_score_top_logprobs) put(j.score_top_logprobs);
    }
}

}  // namespace calserve::device::sim
