#pragma once
//! The golden corpus of a package (document 004 G7/G10): a few prompts and the
//! greedy tokens the reference model gives them, with the top logits of each
//! step. `calserve pack` writes it next to the reference model
//! (`reference-model/golden.jsonl`, one JSON object per line:
//! {"arithmetic": "fp32", "prompt": [ids], "tokens": [ids], "top": [[[id, logit], ...], ...]});
//! a generation must reproduce it before an alias switches to it.
//!
//! Arithmetic: every line names the mode the reference computed in (fp32 or bf16,
//! model/cpu/kernels.hpp); the modes' logits differ (bits, rarely the argmax), so a
//! corpus is compared only with a device that computes in its mode
//! (check_golden_arithmetic); a line without the mode is fp32 (written before lines named it).
//!
//! Matching: the served tokens must equal the corpus tokens; a divergence is
//! forgiven only at a near tie (the served token is among the step's recorded
//! top logits within `k_golden_tie` of the best, which BF16 logits on the device
//! cannot tell apart), after which the histories differ and the entry stops
//! being compared. Fault model: a missing or malformed corpus is an error naming
//! the file and line.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/result.hpp"
#include "model/core/causal_lm.hpp"
#include "model/cpu/kernels.hpp"

namespace calserve::model::package {

inline constexpr const char* k_golden_corpus_file = "golden.jsonl";
// Two logits closer than this (relative to the larger magnitude, at least one
// BF16 step at 1.0) are a tie the device's BF16 output may resolve either way.
inline constexpr float k_golden_tie = 1.0f / 128.0f;

struct golden_entry {
    std::vector<token_id> prompt;
    std::vector<token_id> tokens;                                   // greedy continuation
    std::vector<std::vector<std::pair<token_id, float>>> top;       // per step, best first
    arithmetic arith = arithmetic::fp32;                            // the mode that computed it
};

// Greedy runs of `prompts` (max_tokens each) on `lm`, without stopping at EOS;
// `arith` is the mode `lm` computes in (recorded on every entry).
result<std::vector<golden_entry>> make_golden_corpus(causal_lm& lm, const std::vector<std::vector<token_id>>& prompts,
                                                     std::int64_t max_tokens, arithmetic arith);
void_result write_golden_corpus(const std::filesystem::path& file, const std::vector<golden_entry>& corpus);
result<std::vector<golden_entry>> read_golden_corpus(const std::filesystem::path& file);

struct golden_verdict {
    bool ok = true;
    std::int64_t compared = 0;  // tokens compared
    std::int64_t ties = 0;      // divergences forgiven at a near tie
    std::string reason;         // first mismatch: entry, step, expected vs served
};

// Whether a device computing in `device_arithmetic` ("fp32", "bf16"; empty: the
// device does not say) may be judged by `corpus`: every entry's mode must equal it.
void_result check_golden_arithmetic(const std::vector<golden_entry>& corpus, std::string_view device_arithmetic);

// Compares served greedy continuations (served[i] for corpus[i]) with the corpus.
golden_verdict compare_golden(const std::vector<golden_entry>& corpus, const std::vector<std::vector<token_id>>& served);

}  // namespace calserve::model::package
