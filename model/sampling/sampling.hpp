#pragma once
//! The sampling maths: logits of one sequence -> the next token, its logprob and the
//! top_logprobs. Pure computation; the Sampler actor owns a `sampler` (its scratch) and
//! each request owns its `request_rng`, so results never depend on which sampler or
//! thread ran the step.
//!
//! Pipeline (each step optional; docs/sampling.md has the details):
//!   logit_bias -> repetition penalty (HF: positive / p, negative * p, once per distinct
//!   token of prompt + generated) -> frequency and presence penalties (OpenAI: over
//!   generated tokens, l -= count * f + (count > 0) * p) -> temperature -> top-k ->
//!   top-p (smallest prefix, in weight order, whose mass reaches p of what top-k left)
//!   -> min-p (keep p_i >= min_p * p_max) -> draw.
//! Greedy (temperature 0): argmax of the penalised logits, lowest id on ties; with no
//! penalty, bias or logprobs it is one fused BF16 pass with no allocation. Top-p (and
//! min-p) with no top-k, penalty, bias, mask or logprobs reads a BF16 row directly, with
//! no FP32 copy; every value it computes equals the FP32 path's bit for bit.
//! Logprobs: log-softmax of the penalised logits divided by the temperature (1 when
//! greedy), over the whole vocabulary and before the top-k/top-p/min-p truncation;
//! top_logprobs are the N most likely tokens of that same distribution.
//!
//! Top-k rows (a decode program's sampling head in mode top_k, docs/device.md): the device
//! side (`summarise_top_k`) returns a row's k best logits with their ids and log_z, the
//! log of the softmax's normaliser at the row's temperature; the host side
//! (`sample_top_k`) gives from them exactly what `sample` gives on the whole row,
//! whenever `top_k_determines` holds (greedy, or top-k <= k, and top_logprobs <= k).
//!
//! Token mask (constrained decoding, model/grammar/grammar.hpp): disallowed tokens become -inf
//! before the pipeline; greedy with a mask stays one allocation-free pass.
//! Fault model: invalid parameters or token ids give `invalid_argument`; NaN or +inf
//! logits give `logits_nan`; all tokens masked to -inf gives `invalid_argument`.
//! Invariants: a non-greedy step consumes exactly one `next_u64()` of the request's RNG
//! and a greedy step none; never a full sort of the vocabulary; after the first call
//! with a given vocabulary size and k, a step allocates nothing.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "config/result.hpp"
#include "model/core/bf16.hpp"
#include "model/sampling/kernels.hpp"
#include "model/sampling/params.hpp"
#include "model/sampling/rng.hpp"
#include "model/sampling/select.hpp"

namespace calserve::model {

inline constexpr std::size_t max_top_logprobs = 20;

/// Below this many candidates top-k works on a sorted candidate list; above it, and
/// for top-p without top-k when the growing candidate list has not reached the mass,
/// the radix cutoff over the whole vocabulary is used.
inline constexpr std::size_t sparse_top_k_max = 4096;

/// Largest candidate list tried for top-p without top-k before the radix cutoff
/// (64, then 512): beyond it a flat distribution is cheaper to cut by radix.
inline constexpr std::size_t geometric_top_p_max = 512;

/// Slack on the top-p target, in probability: float sums of a prefix whose exact mass
/// is p must not spill one token further.
inline constexpr double top_p_slack = 1e-6;

struct token_logprob {
    std::int32_t token = -1;
    float logprob = 0.0f;
};

struct sample_result {
    std::int32_t token = -1;
    float logprob = 0.0f;  // set when params.logprobs
    std::array<token_logprob, max_top_logprobs> top{};
    std::size_t top_count = 0;
    std::size_t support = 0;  // tokens that had a non-zero chance this step

    std::span<const token_logprob> top_logprobs() const { return {top.data(), top_count}; }
};

/// A row as a sampling head in mode top_k returns it: its best tokens in `select::better`
/// order (the head pads with -inf / -1 when fewer tokens are above -inf), and
/// log_z = log(sum over the whole row of exp((l_i - max) * inv_t)), max = logits[0],
/// inv_t = inverse_temperature(params): the normaliser of the logprobs.
struct top_k_row {
    std::span<const float> logits;
    std::span<const std::int32_t> ids;
    double log_z = 0.0;
};

/// 1/T as the sampler applies it: capped for a vanishing temperature, 1 when greedy (the
/// scale of a greedy row's logprobs).
float inverse_temperature(const sampling_params& params);

/// Whether a row's k best logits and log_z determine exactly what `sampler::sample` gives
/// on the whole row (no history, no mask; the caller rules a mask out): no penalty or
/// bias, top_logprobs <= k, and greedy or a top-k of at most k (top-p and min-p then act
/// within the top-k candidates only).
bool top_k_determines(const sampling_params& params, std::size_t k, std::size_t vocab);

struct token_history {
    std::span<const std::int32_t> prompt;     // repetition penalty only
    std::span<const std::int32_t> generated;  // repetition, frequency and presence penalties
};

/// Parameter ranges and token ids against the vocabulary size.
void_result validate(const sampling_params& params, std::size_t vocab, token_history history = {});

class sampler {
public:
    explicit sampler(simd_level level = detected_simd_level()) : level_(level) {}

    /// `allowed`: empty, or a token mask (bit i % 32 of word i / 32 set iff token i may be
    /// drawn; size (vocab + 31) / 32), applied before everything else: a disallowed token
    /// is -inf, and bias, penalties, temperature, top-k/p and min-p act within the mask.
    result<sample_result> sample(std::span<const float> logits, const sampling_params& params, token_history history,
                                 request_rng& rng, std::span<const std::uint32_t> allowed = {});
    result<sample_result> sample(std::span<const bf16> logits, const sampling_params& params, token_history history,
                                 request_rng& rng, std::span<const std::uint32_t> allowed = {});

    /// The device side of a top-k row: the k = top_logits.size() best logits of the row and
    /// their ids (padded with -inf / -1), and log_z at the row's temperature (`top_k_row`),
    /// with the very arithmetic `sample` uses for its logprobs.
    result<double> summarise_top_k(std::span<const bf16> logits, const sampling_params& params,
                                   std::span<float> top_logits, std::span<std::int32_t> top_ids);
    /// The host side: what `sample` gives on the whole row of `vocab` logits (same token,
    /// same RNG use, same logprobs bit for bit); invalid_argument unless
    /// top_k_determines(params, k, vocab), logits_nan for a row the head could not summarise.
    result<sample_result> sample_top_k(const top_k_row& row, const sampling_params& params, std::size_t vocab,
                                       request_rng& rng);

    /// Scoring (a prompt token's logprob, docs/api.md "Scoring"): the logprob of `target`
    /// (-1: none, logprob 0) and the `top_n` (<= max_top_logprobs) most likely tokens of the
    /// row at temperature 1 with no penalty, with the arithmetic of a greedy `sample` with
    /// logprobs, so a token scored here gets the bits it gets when generated greedily.
    result<sample_result> score(std::span<const bf16> logits, std::int32_t target, std::size_t top_n);

    /// Bytes reserved by the scratch buffers: constant once warmed up (a step that
    /// allocated would have grown one of them).
    std::size_t scratch_bytes() const;

private:
    static bool needs_edits(const sampling_params& params);
    void apply_mask(std::span<const std::uint32_t> allowed);
    void apply_edits(const sampling_params& params, token_history history);
    result<sample_result> sample_prepared(const sampling_params& params, request_rng& rng);
    void sample_sparse(const sampling_params& params, float max, float inv_t, double u, sample_result& out);
    void sample_dense(const sampling_params& params, float max, float inv_t, double u, sample_result& out,
                      double& total_all);
    void cut_and_draw(const sampling_params& params, kernels::weight_sum sum, bool top_k_on, double u,
                      sample_result& out, std::span<const bf16> raw);
    static bool reads_bf16_directly(const sampling_params& params, std::size_t vocab,
                                    std::span<const std::uint32_t> allowed);
    result<sample_result> sample_top_p_bf16(std::span<const bf16> logits, const sampling_params& params,
                                            request_rng& rng);
    bool nucleus_in_candidates(double target, std::span<const bf16> raw);
    static void draw_from_sorted(std::span<const select::candidate> list, double target, float min_p, double u,
                                 sample_result& out);
    std::int32_t draw_dense(double u, double total) const;
    void fill_logprobs(const sampling_params& params, float max, float inv_t, double log_z, sample_result& out);

    simd_level level_;
    std::vector<float> logits_;    // the penalised logits of the current step
    std::vector<float> weights_;   // exp((l - max) / T), zeroed where filtered out
    std::vector<float> blocks_;    // per-block sums of weights_
    std::vector<std::int16_t> block_keys_;  // per-block largest BF16 order key (the BF16 top-p path)
    std::vector<std::uint32_t> counts_;  // per-token generated counts; all zero between steps
    std::vector<std::uint8_t> seen_;     // per-token repetition mark; all zero between steps
    std::vector<select::candidate> candidates_;
    std::vector<select::candidate> top_;
    select::radix_scratch radix_;
};

}  // namespace calserve::model
