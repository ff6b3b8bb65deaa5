// Simulated NPU: the sampling head of decode programs and token chaining
// (device/sampling_head.hpp). The head draws with the host sampler's own code
// (model::sampler) on the BF16 row the device wrote, so a device-drawn token is the
// host's token for the same row, parameters and RNG state; a top-k row is the sampler's
// own summary (model::sampler::summarise_top_k), so the host samples it bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "device/scoring.hpp"
#include "device/sim/sim_device.hpp"

namespace calserve::device::sim {

std::vector<head_row> sim_device::head_rows(const submodel_desc& sm, const buffer_set& b) const {
    if (!sm.has_sampling_head()) return {};
    for (std::size_t k = 0; k < sm.inputs.size(); ++k) {
        if (sm.inputs[k].name != k_head_params) continue;
        if (!b.written[k]) return {};  // not written: every row gets its logits
        std::vector<head_row> rows(static_cast<std::size_t>(sm.batch));
        std::memcpy(rows.data(), b.inputs[k].data(), std::min(b.inputs[k].size(), rows.size() * sizeof(head_row)));
        return rows;
    }
    return {};
}

// Every chained row names a job the device still knows whose row `chain_row` is the same
// sequence and was drawn there; a row that is not live may not chain.
result<std::vector<std::shared_ptr<sim_device::job>>> sim_device::resolve_chain(std::span<const head_row> head,
                                                                                  std::span<const seq_id> rows) const {
    std::vector<std::shared_ptr<job>> from(head.size());
    for (std::size_t b = 0; b < head.size() && b < rows.size(); ++b) {
        const auto& h = head[b];
        if (h.mode > std::uint32_t(head_mode::top_k))
            return make_error(status::invalid_argument, "row " + std::to_string(b) + ": sampling head mode " +
                                                            std::to_string(h.mode) + " unknown");
        if (h.chain_job == 0) continue;
        const std::string who = "row " + std::to_string(b) + ": chained to job " + std::to_string(h.chain_job);
        if (rows[b] == k_padding_row) return make_error(status::invalid_argument, who + " but the row is padding");
        if (head_mode(h.mode) != head_mode::sample)
            return make_error(status::invalid_argument, who + " but not sampled on the device");
        auto it = std::find_if(head_jobs_.begin(), head_jobs_.end(), [&](const auto& j) { return j->id == h.chain_job; });
        if (it == head_jobs_.end()) return make_error(status::invalid_argument, who + ", which the device no longer holds");
        const auto& src = **it;
        const auto r = static_cast<std::size_t>(h.chain_row);
        if (h.chain_row < 0 || r >= src.rows.size() || src.rows[r] != rows[b] || r >= src.head.size() ||
            head_mode(src.head[r].mode) != head_mode::sample)
            return make_error(status::invalid_argument, who + " row " + std::to_string(h.chain_row) +
                                                            ", which is not this sequence drawn on the device");
        from[b] = *it;
    }
    return from;
}

void sim_device::remember_head_job(const std::shared_ptr<job>& j) {
    const bool draws = std::any_of(j->head.begin(), j->head.end(),
                                   [](const head_row& h) { return head_mode(h.mode) == head_mode::sample; });
    if (!draws) return;
    head_jobs_.push_back(j);
    while (head_jobs_.size() > k_chain_window) head_jobs_.pop_front();
}

// A chained row's input token is its source row's draw (a D2D copy on the device). The
// source computed first (compute is in submission order); a source that failed, or whose
// draw failed, leaves nothing to take and the job fails with it.
void_result sim_device::take_chained_tokens(job& j) const {
    for (std::size_t b = 0; b < j.chain_from.size(); ++b) {
        const auto& src = j.chain_from[b];
        if (!src) continue;
        const auto r = static_cast<std::size_t>(j.head[b].chain_row);
        if (!src->head_done || r >= src->sampled.size() || src->sampled[r] < 0)
            return make_error(status::ccu_exception, "row " + std::to_string(b) + ": chain source job " +
                                                         std::to_string(src->id) + " has no drawn token");
        j.tokens[b] = src->sampled[r];
    }
    return {};
}

void sim_device::run_head(job& j, std::span<const std::byte> bf16_logits) {
    const auto vocab = static_cast<std::size_t>(spec_.vocab_size);
    const std::size_t rows = j.rows.size();
    const auto k = static_cast<std::size_t>(j.head_k);
    j.sampled.assign(rows, -1);
    j.rng_out.assign(rows * 4, 0);
    j.topk_logits.assign(rows * k, 0.0f);
    j.topk_ids.assign(rows * k, -1);
    j.lse.assign(rows, 0.0);
    j.accepted.assign(rows, 0);
    const std::span<const model::bf16> all(reinterpret_cast<const model::bf16*>(bf16_logits.data()),
                                           bf16_logits.size() / sizeof(model::bf16));
    for (std::size_t b = 0; b < rows && b < j.head.size(); ++b) {
        if (j.rows[b] == k_padding_row || (b + 1) * vocab > all.size()) continue;
        const auto& h = j.head[b];
        const auto row = all.subspan(b * vocab, vocab);
        if (head_mode(h.mode) == head_mode::top_k) {
            // The host sampler's own summary: its selection order and its log_z at the row's
            // temperature. A row it cannot summarise (NaN/Inf) reads as no token and NaN.
            auto log_z = head_sampler_.summarise_top_k(row, params_of(h), std::span(j.topk_logits).subspan(b * k, k),
                                                       std::span(j.topk_ids).subspan(b * k, k));
            if (log_z) j.lse[b] = *log_z;
            else {
                std::fill_n(j.topk_ids.begin() + std::ptrdiff_t(b * k), k, -1);
                j.lse[b] = std::nan("");
            }
            continue;
        }
        if (head_mode(h.mode) != head_mode::sample) continue;
        // The head checks its row as the host checks the logits it reads: a NaN or +/-inf
        // logit draws nothing (-1), which the runtime takes for the device fault it is. (The
        // sampler's greedy pass alone would pick the +inf token.)
        if (!check_logits_bf16(std::as_bytes(row))) continue;
        model::request_rng rng;
        model::request_rng::state_type state{h.rng[0], h.rng[1], h.rng[2], h.rng[3]};
        if (const auto& src = j.chain_from.size() > b ? j.chain_from[b] : nullptr) {
            const auto r = static_cast<std::size_t>(h.chain_row);
            std::copy_n(src->rng_out.begin() + std::ptrdiff_t(r * 4), 4, state.begin());
        }
        rng.restore(state);
        if (!j.runs.empty() && j.runs[b] > 1) {
            draw_verify_row(j, b, rng);  // sim_verify.cpp: the draws along the row's drafts
        } else if (auto drawn = head_sampler_.sample(row, params_of(h), {}, rng)) {
            j.sampled[b] = drawn->token;  // else -1: NaN/Inf logits, bad parameters
        }
        std::copy(rng.state().begin(), rng.state().end(), j.rng_out.begin() + std::ptrdiff_t(b * 4));
    }
    j.head_done = true;
}

// What the output copy moves: per live row only what its head mode returns (a job with
// no head parameters: every output whole, as without a head).
std::uint64_t sim_device::output_bytes(const job& j, const submodel_desc& sm) const {
    if (j.head.empty()) {
        std::uint64_t bytes = 0;
        for (const auto& t : sm.outputs)
            if (t.name == "logits" || (!sm.has_sampling_head() && !is_score_output(t.name))) bytes += t.bytes;
        // A scoring prefill also returns its positions' scores (device/scoring.hpp).
        if (!j.score_request.empty()) bytes += std::uint64_t(j.row_tokens) * score_position_d2h_bytes();
        return bytes;
    }
    std::uint64_t bytes = 0;
    for (std::size_t b = 0; b < j.rows.size() && b < j.head.size(); ++b)
        if (j.rows[b] != k_padding_row)
            bytes += head_row_d2h_bytes(head_mode(j.head[b].mode), sm.head_k, spec_.vocab_size) +
                     (!j.runs.empty() && j.runs[b] > 1 ? sizeof(std::int32_t) : 0);  // a verify row's "accepted"
    return bytes;
}

void sim_device::write_head_outputs(job& j, const submodel_desc& sm, buffer_set& b) const {
    const std::size_t rows = j.rows.size();
    for (std::size_t k = 0; k < sm.outputs.size(); ++k) {
        const auto& t = sm.outputs[k];
        auto& out = b.outputs[k];
        const auto put = [&](const auto& v) {
            out.assign(t.bytes, std::byte{0});
            const std::size_t n = std::min<std::size_t>(t.bytes, v.size() * sizeof(v[0]));
            if (n > 0) std::memcpy(out.data(), v.data(), n);
        };
        if (t.name == k_head_sampled) {
            std::vector<std::int32_t> none(rows, -1);
            put(j.head_done ? j.sampled : none);
        } else if (t.name == k_head_rng) {
            put(j.rng_out);
        } else if (t.name == k_head_topk_logits) {
            put(j.topk_logits);
        } else if (t.name == k_head_topk_ids) {
            put(j.topk_ids);
        } else if (t.name == k_head_lse) {
            put(j.lse);
        } else if (t.name == k_head_accepted) {
            put(j.accepted);
        }
    }
}

}  // namespace calserve::device::sim
