#pragma once
//! One admitted generation as the serving actors see it.
//!
//! Ownership is handed along with the job, never shared at once: the BatchTick
//! touches a sequence only while no job holds it; while a job runs, the
//! DeviceActor (device_len), then the Sampler (tokens, rng, constraint) hold it;
//! the messages between them order every access (strand posts synchronise). With
//! token chaining a decoding sequence may be in two decode jobs at once (the second
//! takes its input token from the first's draw on the device): the jobs' holders
//! then own it in job order, and the BatchTick counts its tokens itself
//! (batch_tick_actor.hpp, `decode_chained`). Its KV is budgeted and, on the device,
//! copied, kept and freed by the KvManager alone (kv_manager_actor.hpp).
//!
//! Invariants: prompt_len <= tokens.size(); device_len <= tokens.size();
//! the next job feeds tokens[device_len..]: a prefill when the device holds none of
//! its KV (device_len 0; also after a device reset or a preemption: re-prefill of
//! prompt + generated so far), or from `cached_tokens` when a prefix cache hit copied
//! those in, or when the device holds less than all but its last token (the next chunk
//! of a long prompt, runtime.prefill_chunk); otherwise exactly one decode token.
//! tokens.size() <= kv_tokens <= full_tokens before each job (the BatchTick grows the
//! reservation first).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "actors/prefix_cache.hpp"
#include "model/sampling/params.hpp"
#include "model/sampling/rng.hpp"

namespace calserve::actors {

using sequence_id = std::uint64_t;

// A constrained request's decoding state (null in sequence_state when the request
// has no constraint). Owned like the rest of the sequence: the Sampler updates it
// while it holds the job; it survives preemption and device recovery unchanged,
// because the tokens it has accepted are kept. Invariant: the matcher has accepted
// exactly the tokens generated after </think> (all of them without thinking).
struct sequence_constraint {
    std::unique_ptr<model::grammar::matcher> matcher;  // null: only the reasoning budget
    bool thinking = false;                             // inside the think block
    std::int64_t reasoning_budget = -1;                // < 0: no budget
    std::int64_t reasoning_tokens = 0;
    token_id think_end = -1;                           // the </think> token
    bool ended = false;                                // the grammar is complete: finish with stop
    std::vector<std::uint32_t> mask;                   // scratch, one bit per logits row entry
};

struct sequence_state {
    sequence_id seq = 0;
    std::string request_id;
    std::vector<token_id> tokens;         // prompt, then every sampled token
    std::int64_t prompt_len = 0;
    std::int64_t device_len = 0;          // tokens held in device KV
    bool prefill_alone = false;           // BatchTick, at a prefill job: no other sequence beside it (fed unchunked)
    std::int64_t max_tokens = 0;
    std::int64_t kv_tokens = 0;           // KV reserved now (host budget): grows under kv_policy on_demand
    std::int64_t full_tokens = 0;         // prompt + max_tokens: the most it can ever need
    model::sampling_params params;
    model::request_rng rng;
    std::chrono::nanoseconds arrived{0};
    std::unique_ptr<sequence_constraint> constraint;  // null = unconstrained
    // What can end it besides length (the Request decides; these let the ChipSession
    // tell the rows whose last token cannot have ended them: see cannot_have_ended).
    std::vector<token_id> stop_ids;       // request stop ids, plus EOS unless ignore_eos
    bool stop_strings = false;            // only the Request's stop matcher can judge a token
    // Device jobs holding this sequence lost to a fault, in a row (0 after any job that
    // completes); past runtime.max_job_retries the request fails alone.
    int failed_jobs = 0;
    // Prefix cache: the scope its KV may be shared in (the package and the request's
    // cache_salt), and how many prompt tokens its first prefill took from cached KV.
    cache_key scope{};
    std::int64_t cached_tokens = 0;
    // Scoring (docs/api.md "Scoring"): >= 0 asks every prefill job of the prompt for each
    // prompt token's logprob and that many alternatives (-1: none); such a sequence takes
    // nothing from the prefix cache. prompt_scores[i] is prompt token i's (i >= 1), written
    // by the DeviceActor as the prefill's chunks complete (sized prompt_len at admission).
    std::int32_t score_top_n = -1;
    std::vector<prompt_score> prompt_scores;
    bool scoring() const { return score_top_n >= 0; }

    std::int64_t generated() const { return std::int64_t(tokens.size()) - prompt_len; }
    std::int64_t pending_tokens() const { return std::int64_t(tokens.size()) - device_len; }
    // The token just sampled cannot have ended the sequence: not a stop id, under
    // max_tokens, and nothing only the Request can judge (stop strings, a grammar). Such
    // a row may run its next step before its Request's answer arrives.
    bool cannot_have_ended() const {
        if (stop_strings || constraint || generated() >= max_tokens || generated() <= 0) return false;
        return std::find(stop_ids.begin(), stop_ids.end(), tokens.back()) == stop_ids.end();
    }
};
using sequence_ptr = std::shared_ptr<sequence_state>;

}  // namespace calserve::actors
