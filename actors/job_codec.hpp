#pragma once
//! Job codec: the bytes a device job writes before it runs (H2D) and the bytes it
//! returns (D2H), as plain functions the DeviceActor calls (no actor, no strand),
//! so the encoding of every job kind is tested without an actor.
//!
//! Encode (pure): a prefill, or a chunk of one, feeds `tokens[past..past+count)` of
//! one sequence (`plan_prefill` picks the span); the warm-up's golden prefill is a
//! prefill of a fixed prompt through the same `encode_prefill`. A decode feeds one
//! token per live row, padded to the profile's batch (`encode_decode`); a chained row
//! takes its token from its source job's draw on the device, so its own token is 0
//! and its sampling-head parameters name that job and row (`head_params_of`). Each
//! row's head mode (`head_mode_of`, `assign_head_modes`) says what the head returns.
//! A verify row (drafts in job.drafts) feeds its input token as a decode row does and
//! its drafts in "draft_tokens"; its cur_seq_len is 1 + drafts (`take_verify` reads
//! what the head kept). `apply_prefill_kv` readies a prefill's KV on the device (the golden prefill's
//! too), and `submit_input` writes an encoded input in the documented order (slice,
//! inputs, CSRs, head parameters) and starts the job.
//!
//! Decode: the head's draws (`take_draws`), its top-k rows (`take_top_k`), and the
//! logits of the rows the host samples, each checked before release: a row the head
//! could not draw or summarise, or a NaN/Inf logit, is a `logits_nan` device fault
//! (`check_logits_rows`, `check_host_rows`). `read_outputs` reads all of a job's
//! outputs from the device in that order.
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "actors/job_context.hpp"
#include "config/result.hpp"
#include "device/device.hpp"
#include "device/sampling_head.hpp"

namespace calserve::model {
class thread_pool;
}

namespace calserve::actors {

// What one job writes to the device before it runs.
struct job_input {
    std::int64_t slice_tokens = 0;        // tokens per row of the slice (a prefill's count; 1 for a decode)
    std::vector<std::int32_t> tokens;     // "token": a prefill's tokens, or one per decode row (padding 0)
    std::vector<std::int32_t> positions;  // "position", alike
    // The CSRs: one pair for a prefill (write_csr), one per live row for a decode (write_csr_row).
    std::vector<std::uint32_t> cur_seq_len;
    std::vector<std::uint32_t> past_kv_len;
    // A decode's rows as submitted (padding rows are device::k_padding_row); empty for a prefill.
    std::vector<device::seq_id> rows;
    std::vector<device::head_row> head;   // "sample_params", one per profile row; empty without a head
    std::vector<std::int32_t> score_request;  // a scoring prefill's "score_request" (target, top-N per token)
    // "draft_tokens", k_verify_drafts_max per profile row: empty when no row drafts.
    std::vector<std::int32_t> drafts;
};

// The span a prefill job feeds: tokens [past, past + count).
struct prefill_span {
    std::int64_t past = 0;
    std::int64_t count = 0;
    bool partial = false;                 // a chunk short of the last token: nothing to sample
    bool fresh = false;                   // past == 0: the sequence's KV is (re)allocated first
    bool copy_lost = false;               // its KV was to come from the prefix cache and the device lacks it
    friend bool operator==(const prefill_span&, const prefill_span&) = default;
};

// The next prefill of a sequence of `tokens` tokens whose host view says `device_len`
// are on the device, which holds `device_kv_len`; at most `chunk` tokens (0 = all).
prefill_span plan_prefill(std::int64_t tokens, std::int64_t device_len, std::int64_t device_kv_len,
                          std::int64_t chunk);
// The input of a prefill of tokens [past, past + count) of `tokens`.
job_input encode_prefill(std::span<const std::int32_t> tokens, std::int64_t past, std::int64_t count);
// A scoring prefill's "score_request" (device/scoring.hpp) for tokens [past, past + count)
// of `tokens`, whose first `prompt_len` are the prompt: position p names prompt token p + 1
// with `top_n` alternatives; positions whose next token is not a prompt token ask nothing.
std::vector<std::int32_t> encode_score_request(std::span<const std::int32_t> tokens, std::int64_t prompt_len,
                                               std::int32_t top_n, std::int64_t past, std::int64_t count);
// A scoring prefill's outputs into seq.prompt_scores: position p's into prompt token p + 1's.
void_result take_scores(device::device& dev, const std::string& sm, device::slot s, sequence_state& seq,
                        std::int64_t past, std::int64_t count);
// The input of a decode step of `job`'s live rows in a program of `batch` rows, row r
// at position `pasts[r]`; `with_head` adds the sampling head's parameters.
job_input encode_decode(const job_context& job, std::int64_t batch, std::span<const std::int64_t> pasts,
                        bool with_head);

// What the head returns for one row of a program whose head has top-k `head_k` (0: none).
device::head_mode head_mode_of(const sequence_state& seq, std::int64_t head_k, std::int64_t vocab);
// Each row's head mode into job.head, and job.chain_from_id: the source's device job
// when `source_live` (submitted in this generation), else 0. False when a chained row
// cannot take its token from the source (not live, or a row not drawn on either side):
// the job must go back unrun.
bool assign_head_modes(job_context& job, bool source_live);
// Drafts only ride on rows the program's head draws (`head`: the profile has one): the
// drafts of a row the head does not draw, or of a chained row, are dropped (it decodes
// plainly); at most k_verify_drafts_max are kept. Needs job.head_k, vocab and chain_rows.
void keep_verifiable_drafts(job_context& job, bool head);
// The sampling head's "sample_params" rows of a decode job's live rows (drawn rows with
// their parameters and RNG state, chained rows naming their source row).
void head_params_of(const job_context& job, std::span<device::head_row> out);

// The KV a prefill of `span` needs on the device: a fresh sequence's KV freed (stale,
// from before a reset or preemption) and reserved for `reserve` tokens, then applied
// up to the span's end.
void_result apply_prefill_kv(device::device& dev, device::seq_id sequence, const prefill_span& span,
                             std::int64_t reserve, std::chrono::nanoseconds timeout);
// Writes `in` to submodel `sm`'s slot `s` and starts the job: a prefill of `sequence`
// (in.rows empty) or a decode of in.rows.
result<device::job_id> submit_input(device::device& dev, const std::string& sm, device::slot s, const job_input& in,
                                    device::seq_id sequence);

// The head's draws ("sampled", "rng_state") of the drawn rows into job.drawn_tokens /
// drawn_rng; logits_nan when the head drew no token for one.
void_result take_draws(job_context& job, std::span<const std::byte> tokens, std::span<const std::byte> states);
// Verify rows (docs/device.md "Verify jobs"): the head's "accepted" output into
// job.accepted, and each verify row's emitted run (model::speculative::emitted_tokens:
// kept drafts then the draw, cut after a stop id or at max_tokens) into job.runs, its
// length into job.counts (the positions its KV keeps past the sequence's device_len).
// Call after take_draws; internal when a count is outside [0, drafts].
void_result take_verify(job_context& job, std::span<const std::byte> accepted);
// The head's top K, their ids and log_z ("topk_logits", "topk_ids", "lse") into
// job.topk_*; logits_nan when a top-k row holds no finite summary.
void_result take_top_k(job_context& job, std::span<const std::byte> logits, std::span<const std::byte> ids,
                       std::span<const std::byte> log_z);
// The host's NaN/Inf check of a job's `rows` live rows of logits, rows shared among
// the pool's threads (null: this thread); the error names the first bad logit.
void_result check_logits_rows(std::span<const std::byte> logits, std::size_t rows, model::thread_pool* pool);
// The NaN/Inf check of the rows of job.logits the host samples (head mode logits).
void_result check_host_rows(const job_context& job, model::thread_pool* pool);
// Bytes the job's output copy moves (D2H), as the simulator moves them: each live row's
// under its head mode, a verify row's "accepted" count, a scoring prefill's scores.
std::uint64_t d2h_bytes(const job_context& job);

// Reads what the job returns from submodel `sm`: the head's draws, its top-k rows, then
// the logits of the rows the host samples, each checked before it is released.
void_result read_outputs(device::device& dev, const std::string& sm, job_context& job, model::thread_pool* pool);

}  // namespace calserve::actors
