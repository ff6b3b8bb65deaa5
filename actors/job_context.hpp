#pragma once
//! JobContext: everything one device job owns, one per ChipSession slot.
//!
//! A job is one prefill (one row) or one decode batch (1..max_batch live rows,
//! padded by the DeviceActor to the smallest decode profile that holds them).
//! It travels ChipSession -> DeviceActor (fill, infer, wait, copy logits out:
//! H2D..D2H) -> ChipSession -> Sampler -> ChipSession, and only the current
//! holder touches it (the rows' sequences included). The logits buffer is the
//! slot's exclusive host buffer: the slot cannot take a new job until the
//! Sampler has consumed it.
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "actors/sequence.hpp"
#include "config/result.hpp"
#include "device/sampling_head.hpp"
#include "device/types.hpp"

namespace calserve::actors {

struct job_context {
    device::slot slot = device::slot::ping;
    std::uint64_t epoch = 0;              // ChipSession's job counter for this slot
    std::vector<sequence_ptr> rows;       // live rows in row order; a prefill has exactly one
    bool prefill = false;
    bool partial = false;                 // a prefill chunk short of the last token: nothing to sample
    std::int64_t scored_from = -1;        // a scoring prefill: the first position it fed (else -1)
    std::int64_t profile = 1;             // batch of the submodel that ran it (rows.size() <= profile)
    std::vector<std::int64_t> counts;     // tokens fed per row
    int failed_row = -1;                  // a per-row device call (kv_apply) failed: only that row's request fails
    std::int64_t vocab = 0;
    std::vector<std::byte> logits;        // BF16, >= rows.size() x vocab (D2H target; a padded batch's whole output)
    // Sampling head and token chaining (docs/device.md "Sampling head"). The DeviceActor
    // decides per row what the head returns (`head`: the draw, the top K, or the logits)
    // and, after the job, copies the draws out (`drawn_tokens`, `drawn_rng`) and the top-k
    // rows (`topk_*`); the ChipSession applies the draws to the rows' sequences, the
    // Sampler samples the other rows (from the top K, or the logits). A chained row (`chain_rows[r] >= 0`)
    // takes its input token from row chain_rows[r] of `chain_from`, the decode job before
    // it in the other slot, still in flight when this one was formed: the host submits this
    // step before it has read that one. `chain_from` is dropped once the job is submitted.
    std::vector<device::head_mode> head;  // per row; logits for every row without a head
    std::int64_t head_k = 0;              // K of the program's head (top_k rows)
    std::vector<float> topk_logits;       // top_k rows: K per row, in row order (others unused)
    std::vector<std::int32_t> topk_ids;
    std::vector<double> topk_log_z;       // per row: log_z (model::top_k_row)
    std::vector<std::int32_t> drawn_tokens;
    std::vector<std::array<std::uint64_t, 4>> drawn_rng;  // the row's RNG state after the draw
    std::shared_ptr<job_context> chain_from;
    std::vector<int> chain_rows;          // per row: its row in chain_from, or -1 (token from the host)
    // Speculative decoding (docs/device.md "Verify jobs"): a row with drafts is a verify row,
    // its drafted tokens chosen by the BatchTick (empty: a plain step). After the job,
    // `accepted` holds the drafts the head kept and `runs` each drawn row's emitted tokens
    // (a verify row's kept drafts and draw, cut where plain decoding stops; a plain drawn
    // row's one draw); counts[r] is then the positions its KV keeps past its input.
    std::vector<std::vector<token_id>> drafts;
    std::vector<std::int32_t> accepted;
    std::vector<std::vector<token_id>> runs;
    std::uint64_t chain_from_id = 0;      // chain_from's device job id (set at fill)
    std::uint64_t device_job = 0;         // the device's job id, once submitted
    std::uint64_t device_generation = 0;  // the DeviceActor's generation when it submitted
    // The device generation (DeviceActor: bumped at every fault and reset) whose KV the
    // BatchTick's view of its rows described when it formed the job. The DeviceActor runs
    // a job only in that generation: after a reset its rows' KV is gone (or, re-prefilled,
    // belongs to newer jobs), so an older job is lost, never sent to the device.
    std::uint64_t generation = 0;
    bool unrun = false;                   // not submitted: its chain source never was; rows handed back unrun
    // The Sampler's answer per row: [0] = chosen token + logprob, then top_logprobs.
    std::vector<result<std::vector<token_logprob>>> picks;
    // Phase times (runtime clock) for metrics and the timing log.
    std::chrono::nanoseconds t_fill{0}, t_submitted{0}, t_done{0}, t_sampled{0};
    // Start of the job's own wall time: t_fill, or for a chained job (filled while the job
    // before it ran) the completion of that job, so a request's job walls never overlap.
    std::chrono::nanoseconds t_wall_from{0};
    double device_compute_s = 0;          // modelled compute time reported by the device

    bool chained() const {
        for (int c : chain_rows)
            if (c >= 0) return true;
        return false;
    }
    device::head_mode mode(std::size_t r) const { return r < head.size() ? head[r] : device::head_mode::logits; }
    bool drawn(std::size_t r) const { return mode(r) == device::head_mode::sample; }
    std::size_t rows_in(device::head_mode m) const {
        std::size_t n = 0;
        for (std::size_t r = 0; r < rows.size(); ++r) n += mode(r) == m ? 1 : 0;
        return n;
    }
    bool any_drawn() const { return rows_in(device::head_mode::sample) > 0; }
    std::size_t drafted(std::size_t r) const { return r < drafts.size() ? drafts[r].size() : 0; }
    bool verifies() const {
        for (const auto& d : drafts)
            if (!d.empty()) return true;
        return false;
    }

    std::vector<sequence_id> row_ids() const {
        std::vector<sequence_id> ids;
        ids.reserve(rows.size());
        for (const auto& r : rows) ids.push_back(r->seq);
        return ids;
    }
};
using job_ptr = std::shared_ptr<job_context>;

}  // namespace calserve::actors
