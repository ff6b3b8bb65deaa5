#pragma once
//! Drafting for speculative decoding: proposes the tokens a sequence is likely to
//! continue with, for one verify job to check (docs/speculative.md).
//!
//! Role: a `drafter` is per sequence and pure with respect to the runtime: it sees
//! the sequence's tokens (prompt and output) and answers at most `max_drafts` tokens.
//! A wrong draft costs only the verify job's extra positions, never a token: the
//! verify job keeps the drafts its own draws agree with (device/sampling_head.hpp).
//!
//! Interface for later methods: a draft model keeps its own KV per sequence and needs
//! to learn how far the sequence really went after a verify (`on_kept`, the tokens
//! it may keep); the n-gram method needs neither and ignores it.
//!
//! `ngram_drafter` (prompt lookup): the last n tokens of the sequence, for n from
//! `n_max` down to `n_min`, are searched in the earlier context (newest occurrence
//! first, within the last `k_ngram_window` tokens); the tokens that followed the first
//! match with a full run of `max_drafts` continuation tokens are proposed (else the
//! longest continuation found for that n). A longer n wins over a shorter one.
//! Invariants: the answer holds at most `max_drafts` tokens, each one taken from the
//! context; the same context gives the same answer.
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "model/core/causal_lm.hpp"

namespace calserve::model::speculative {

enum class method : std::uint8_t { none, ngram };
std::string_view to_string(method m);
// "none" | "ngram"; nullopt-like: returns false when the text names no method.
bool parse_method(std::string_view text, method& out);

class drafter {
public:
    virtual ~drafter() = default;
    // At most `max_drafts` tokens that may follow `sequence` (its prompt and output).
    virtual std::vector<token_id> propose(std::span<const token_id> sequence, std::int64_t max_drafts) = 0;
    // The sequence now holds `length` tokens the verify kept (a draft model rolls back its KV).
    virtual void on_kept(std::int64_t length) { (void)length; }
};

// Most recent tokens searched for a match: bounds a proposal's cost on long contexts.
inline constexpr std::int64_t k_ngram_window = 8192;

struct ngram_options {
    std::int64_t n_min = 1;
    std::int64_t n_max = 3;
};

class ngram_drafter final : public drafter {
public:
    explicit ngram_drafter(ngram_options options) : options_(options) {}
    std::vector<token_id> propose(std::span<const token_id> sequence, std::int64_t max_drafts) override;

private:
    ngram_options options_;
};

struct drafter_options {
    method kind = method::none;
    ngram_options ngram;
};

// The drafter of one sequence; null for method::none.
std::unique_ptr<drafter> make_drafter(const drafter_options& options);

}  // namespace calserve::model::speculative
