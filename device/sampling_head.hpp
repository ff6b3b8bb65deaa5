#pragma once
//! The sampling head of a decode program (a C3 extension, docs/device.md "Sampling
//! head"): the program's last stage turns each row's logits into what the host
//! needs of them, so the output copy carries a token id (or k logits) per row
//! instead of a whole vocabulary row, and a decode job can take its input tokens
//! from the previous job's sampled output on the device (token chaining).
//!
//! Tensors (derived for every decode program of a package whose manifest declares
//! `sampling_head.top_k = K`; B = the program's batch):
//!   input  "sample_params"  uint32 [B,16]  one `head_row` (64 B) per row
//!   output "sampled"        int32  [B]     the drawn token (mode sample), else -1
//!   output "rng_state"      uint32 [B,8]   the row's xoshiro256** state after the draw
//!   output "topk_logits"    fp32   [B,K]   mode top_k: the K largest logits, descending
//!   output "topk_ids"       int32  [B,K]   their token ids (ties: lower id first)
//!   output "lse"            fp64   [B]     mode top_k: log_z = log sum_i exp((l_i - max) * inv_t)
//!                                          over the whole row, max = topk_logits[0],
//!                                          inv_t = 1/temperature (1 when greedy): the
//!                                          row's log-sum-exp at its temperature, shifted by
//!                                          max * inv_t (model::top_k_row); NaN, ids -1 when
//!                                          the row holds NaN/+inf
//!   input  "draft_tokens"   int32  [B,D]   verify rows: the row's drafted tokens (D = k_verify_drafts_max)
//!   output "accepted"       int32  [B]     verify rows: drafts kept (0 for every other row)
//! "logits" stays: rows in mode `logits` (or a job that writes no "sample_params")
//! read it as before. The output copy (D2H) moves, per live row, only what its mode
//! returns: logits vocab x 2 B, sample 4 + 32 B, top_k K x 8 + 8 B.
//!
//! Exactness: the head draws with the host sampler's own code (model/sampling) on
//! the row's BF16 logits, the row's parameters and RNG state, so a token drawn on
//! the device is the token the host would draw from the same row; it only takes
//! rows that need nothing but their logits (`model::head_can_sample`). A top-k row is
//! the sampler's own summary (`model::sampler::summarise_top_k`), from which the host
//! samples (`sample_top_k`) exactly what it samples from the whole row; the runtime
//! asks for it only when `model::top_k_determines` holds (logprobs rows, greedy or
//! top-k <= K). log_z is fp64 so the logprobs equal host sampling's bit for bit.
//! Chaining: a row with `chain_job != 0` takes its input token and RNG state from
//! row `chain_row` of that earlier job's head output (a D2D copy on the device);
//! the job must still be known to the device, that row must be the same sequence
//! and sampled there. Its "token" input is then not read.
//! Verify rows (speculative decoding, docs/device.md "Verify jobs"): a drawn row whose
//! `cur_seq_len` is 1 + d (0 < d <= D) carries d drafted tokens in "draft_tokens"; the
//! program computes its d + 1 positions in one pass and the head draws position i with
//! the RNG state after the i draws before it, as i more plain steps would; it stops at
//! the first draw that differs from draft i + 1. "accepted" = the drafts kept, "sampled"
//! = the last draw, "rng_state" = the state after it. The sequence's KV then holds all
//! d + 1 positions: the host drops the rejected ones with `kv_keep` before its next job.
#include <cstdint>
#include <string_view>

#include "model/sampling/params.hpp"

namespace calserve::device {

inline constexpr std::string_view k_head_params = "sample_params";
inline constexpr std::string_view k_head_sampled = "sampled";
inline constexpr std::string_view k_head_rng = "rng_state";
inline constexpr std::string_view k_head_topk_logits = "topk_logits";
inline constexpr std::string_view k_head_topk_ids = "topk_ids";
inline constexpr std::string_view k_head_lse = "lse";
inline constexpr std::string_view k_head_drafts = "draft_tokens";
inline constexpr std::string_view k_head_accepted = "accepted";

// Most drafted tokens one row of a verify job carries (the "draft_tokens" width D).
inline constexpr std::int64_t k_verify_drafts_max = 7;

enum class head_mode : std::uint32_t {
    logits = 0,  // the row's full logits (the host samples: penalties, bias, masks, logprobs)
    sample = 1,  // the head draws the token
    top_k = 2,   // the head returns the K largest logits, their ids and the row's log-sum-exp
};

// One row of "sample_params". Plain data, 64 bytes, the device's layout.
struct head_row {
    std::uint32_t mode = 0;        // head_mode
    float temperature = 0;         // 0 = greedy
    float top_p = 1;
    std::int32_t top_k = 0;
    float min_p = 0;
    std::int32_t chain_row = -1;   // row of `chain_job` whose sampled token and RNG state this row takes
    std::uint64_t chain_job = 0;   // 0: the row's "token" input and `rng` are used
    std::uint64_t rng[4] = {0, 0, 0, 0};
};
static_assert(sizeof(head_row) == 64, "sample_params rows are 16 x uint32");

inline constexpr std::int64_t k_head_row_words = 16;
inline constexpr std::int64_t k_head_rng_words = 8;

// D2H bytes a live row costs in `mode` (head of top-k `k`, vocabulary `vocab`).
constexpr std::uint64_t head_row_d2h_bytes(head_mode mode, std::int64_t k, std::int64_t vocab) {
    switch (mode) {
        case head_mode::sample: return 4 + 4 * k_head_rng_words;
        case head_mode::top_k: return std::uint64_t(k) * 8 + 8;
        case head_mode::logits: break;
    }
    return std::uint64_t(vocab) * 2;
}

// The sampling parameters a head row carries (the head samples with these, no history).
inline model::sampling_params params_of(const head_row& r) {
    model::sampling_params p;
    p.temperature = r.temperature;
    p.top_p = r.top_p;
    p.top_k = r.top_k;
    p.min_p = r.min_p;
    return p;
}

}  // namespace calserve::device
