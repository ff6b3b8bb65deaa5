// Simulated NPU: verify jobs of speculative decoding (device/sampling_head.hpp, docs/device.md
// "Verify jobs"). A drawn row of a decode step whose cur_seq_len is 1 + d carries d drafts;
// the reference model computes every row's positions in one pass (`decode_runs`, weights
// read once), and the head draws position i with the RNG state after the i draws before
// it, stopping at the first draw that differs from the next draft. Position i's logits are
// those of the i-th plain decode step (row-exact pass), so every draw is the draw plain
// decoding makes there: the tokens never depend on whether the host drafted.
#include <algorithm>
#include <cstring>
#include <limits>

#include "device/bf16.hpp"
#include "device/sim/sim_device.hpp"

namespace calserve::device::sim {

namespace {
std::size_t input_at(const submodel_desc& sm, std::string_view name) {
    std::size_t k = 0;
    while (k < sm.inputs.size() && sm.inputs[k].name != name) ++k;
    return k;
}
constexpr auto k_width = static_cast<std::size_t>(k_verify_drafts_max);
}  // namespace

bool sim_device::may_verify(const submodel_desc& sm, const buffer_set& b) const {
    return sm.kind == submodel_kind::decode && sm.has_sampling_head() && tokens_of(sm, b) == 1 &&
           input_at(sm, k_head_drafts) < sm.inputs.size();
}

// Every row with drafts is drawn by the head and its drafts are tokens of the vocabulary.
void_result sim_device::validate_drafts(const submodel_desc& sm, const buffer_set& b, std::span<const seq_id> rows,
                                        std::span<const head_row> head) const {
    if (!may_verify(sm, b)) return {};
    const std::size_t k = input_at(sm, k_head_drafts);
    for (std::size_t row = 0; row < rows.size(); ++row) {
        if (rows[row] == k_padding_row || !b.csr_cur[row] || *b.csr_cur[row] <= 1) continue;
        const std::string who = "row " + std::to_string(row) + ": ";
        if (!b.written[k]) return make_error(status::missing_tensor, who + "drafts but " + sm.name + "/draft_tokens not written");
        if (row >= head.size() || head_mode(head[row].mode) != head_mode::sample)
            return make_error(status::invalid_argument, who + "a verify row must be drawn by the sampling head (mode sample)");
        const auto d = static_cast<std::size_t>(*b.csr_cur[row] - 1);
        std::vector<std::int32_t> drafts(d);
        std::memcpy(drafts.data(), b.inputs[k].data() + row * k_width * sizeof(std::int32_t), d * sizeof(std::int32_t));
        for (auto t : drafts)
            if (t < 0 || t >= spec_.vocab_size)
                return make_error(status::invalid_argument, who + "draft token " + std::to_string(t) + " outside the vocabulary");
    }
    return {};
}

void sim_device::take_verify_inputs(job& j, const submodel_desc& sm, const buffer_set& b) const {
    if (!may_verify(sm, b)) return;
    std::vector<std::int64_t> runs(j.rows.size(), 0);
    bool any = false;
    for (std::size_t row = 0; row < j.rows.size(); ++row) {
        if (j.rows[row] == k_padding_row) continue;
        runs[row] = b.csr_cur[row] ? std::int64_t(*b.csr_cur[row]) : 1;
        any = any || runs[row] > 1;
    }
    if (!any) return;
    j.runs = std::move(runs);
    const auto& in = b.inputs[input_at(sm, k_head_drafts)];
    j.drafts.assign(j.rows.size() * k_width, 0);
    std::memcpy(j.drafts.data(), in.data(), std::min(in.size(), j.drafts.size() * sizeof(std::int32_t)));
}

// One pass over every live position; the head reads them all (BF16, as the device writes
// logits), and the "logits" output holds each row's first position (the plain step's row).
void_result sim_device::compute_verify(job& j, std::vector<float>& logits) {
    const auto vocab = static_cast<std::size_t>(model_->shape().vocab_size);
    std::vector<model::seq_id> seqs;
    std::vector<std::int64_t> counts;
    std::vector<model::token_id> toks;
    std::vector<std::size_t> first;  // per live row: its first position
    for (std::size_t b = 0; b < j.rows.size(); ++b) {
        if (j.rows[b] == k_padding_row) continue;
        first.push_back(toks.size());
        seqs.push_back(j.rows[b]);
        counts.push_back(j.runs[b]);
        toks.push_back(j.tokens[b]);
        for (std::int64_t i = 1; i < j.runs[b]; ++i) toks.push_back(j.drafts[b * k_width + std::size_t(i - 1)]);
    }
    std::vector<float> packed(toks.size() * vocab);
    if (auto r = model_->decode_runs(seqs, counts, toks, packed); !r) return r;
    if (j.poison_logits) {
        for (std::size_t p = 0; p < toks.size(); ++p) {
            packed[p * vocab] = std::numeric_limits<float>::quiet_NaN();
            packed[p * vocab + vocab / 2] = std::numeric_limits<float>::infinity();
        }
    }
    j.verify_bf16.resize(packed.size() * sizeof(model::bf16));
    store_bf16(packed, j.verify_bf16);
    std::fill(logits.begin(), logits.end(), 0.0f);
    std::size_t live = 0;
    for (std::size_t b = 0; b < j.rows.size(); ++b) {
        if (j.rows[b] == k_padding_row) continue;
        std::copy_n(packed.data() + first[live++] * vocab, vocab, logits.data() + b * vocab);
    }
    return {};
}

// Row `row`'s draws along its drafts, from `rng` (the row's state before position 0).
void sim_device::draw_verify_row(job& j, std::size_t row, model::request_rng& rng) {
    const auto vocab = static_cast<std::size_t>(spec_.vocab_size);
    std::size_t at = 0;  // the row's first position among the live positions
    for (std::size_t b = 0; b < row; ++b) at += static_cast<std::size_t>(j.runs[b]);
    const std::span<const model::bf16> all(reinterpret_cast<const model::bf16*>(j.verify_bf16.data()),
                                           j.verify_bf16.size() / sizeof(model::bf16));
    const auto params = params_of(j.head[row]);
    j.sampled[row] = -1;
    for (std::int64_t i = 0; i < j.runs[row]; ++i) {
        if ((at + std::size_t(i) + 1) * vocab > all.size()) return;
        const auto logits = all.subspan((at + std::size_t(i)) * vocab, vocab);
        if (!check_logits_bf16(std::as_bytes(logits))) {
            j.sampled[row] = -1;  // the logits_nan fault it is, as for a plain row
            return;
        }
        auto drawn = head_sampler_.sample(logits, params, {}, rng);
        if (!drawn) {
            j.sampled[row] = -1;
            return;
        }
        j.sampled[row] = drawn->token;
        if (i + 1 == j.runs[row] || drawn->token != j.drafts[row * k_width + std::size_t(i)]) return;
        ++j.accepted[row];
    }
}

}  // namespace calserve::device::sim
