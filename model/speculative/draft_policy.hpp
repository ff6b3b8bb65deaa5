#pragma once
//! How many tokens to draft for a sequence's next step: a pure policy, table-tested
//! without actors (docs/speculative.md).
//!
//! Rules, in order:
//!   1. nothing to draft when the method is off, the step has more live rows than
//!      `max_batch`, the step is compute-bound (extra positions then cost as much as
//!      the tokens they might save), or the request has at most one token left;
//!   2. else the draft length k in [1, max_drafts] maximising the expected tokens per
//!      unit of step cost, (1 + a + ... + a^k) / (1 + c k), where a is the sequence's
//!      recent per-draft acceptance and c the cost of one more position relative to a
//!      one-token step; k never exceeds the tokens left minus one;
//!   3. if that best ratio is below `min_gain`, nothing, except a one-token probe every
//!      `probe_every` plain steps, so a sequence whose text turns repetitive is noticed.
//! Acceptance is an exponentially weighted estimate of P(draft accepted | the drafts
//! before it were), updated from each verify (drafted d, accepted m: m successes and
//! one failure when m < d). The estimate starts at `initial_acceptance`.
#include <cstdint>

namespace calserve::model::speculative {

struct policy_options {
    bool enabled = false;
    std::int64_t max_drafts = 4;        // runtime.speculative.draft_tokens
    std::int64_t max_batch = 4;         // runtime.speculative.max_batch
    double min_gain = 1.1;              // expected tokens per step cost that drafting must reach
    std::int64_t probe_every = 16;      // plain steps between one-token probes when drafting lost
    double initial_acceptance = 0.5;
    double smoothing = 0.3;             // weight of the newest verify in the estimate
};

// A sequence's recent acceptance; plain data kept with the sequence.
struct acceptance {
    double rate = 0.5;
    std::int64_t plain_steps = 0;  // steps since its last draft
};

acceptance initial_acceptance(const policy_options& o);

struct step_facts {
    std::int64_t live_rows = 1;         // rows of the step the sequence would join
    bool compute_bound = false;         // the step's time is set by FLOPs, not by reading weights
    double position_cost = 0.1;         // one more position / a one-token step's time (position_cost())
    std::int64_t tokens_left = 0;       // max_tokens minus tokens generated
};

// The number of tokens to draft (0: a plain decode step).
std::int64_t draft_length(const policy_options& o, const acceptance& a, const step_facts& f);

// After a verify of `drafted` tokens of which `accepted` were kept (0 <= accepted <= drafted);
// a plain step (drafted 0) only counts towards the next probe.
void observe(const policy_options& o, acceptance& a, std::int64_t drafted, std::int64_t accepted);

// The expected tokens a step emits with k drafts at per-draft acceptance `rate`.
double expected_tokens(double rate, std::int64_t k);

// The policy's cost of a position when the device cannot price a step (a recordable
// daemon on the cpu backend, whose measured rates are not in the trace, and virtual time).
inline constexpr double k_fixed_position_cost = 0.1;

// One more position per row, relative to a one-token step, from the device's prices of
// the same rows' step with one position each (`plain`) and with 1 + `drafts` each
// (`verify`), in any one unit: (verify - plain) / (plain x drafts), never below 0;
// `fixed` when either price is unknown (<= 0) or `drafts` < 1.
double position_cost(double plain, double verify, std::int64_t drafts, double fixed = k_fixed_position_cost);

}  // namespace calserve::model::speculative
