#pragma once
//! The pre-tokenizer's Split regex, compiled once with PCRE2 (UTF + UCP, JIT) from
//! the pattern string found in tokenizer.json, and the "Isolated" split built on it:
//! every match becomes a piece and so does every gap between matches.
//!
//! Fault model: a pattern PCRE2 cannot compile fails `compile` with the PCRE2
//! message and offset; a match-time failure (JIT stack or match limit) is retried
//! with the interpreter and a larger heap, and otherwise reported, never ignored.
//! Invariants: the compiled code is immutable and shared by all threads; per-call
//! match data is private to the call, so `split` is thread-safe. Subjects are
//! UTF-8 validated by the caller, so PCRE2's own check is skipped.
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "config/result.hpp"

namespace calserve::model::detail {

class split_regex {
public:
    static result<std::unique_ptr<split_regex>> compile(const std::string& pattern);
    ~split_regex();
    split_regex(const split_regex&) = delete;
    split_regex& operator=(const split_regex&) = delete;

    // Calls `piece` for each match and each non-empty gap, in order.
    template <class F>
    void_result split(std::string_view text, F&& piece) const {
        return split_impl(text, piece_fn(std::ref(piece)));
    }

    const std::string& pattern() const { return pattern_; }
    bool jit() const { return jit_; }

private:
    using piece_fn = std::function<void(std::string_view)>;
    split_regex() = default;
    void_result split_impl(std::string_view text, const piece_fn& piece) const;

    std::string pattern_;
    void* code_ = nullptr;  // pcre2_code_8*, kept opaque to keep pcre2.h out of headers
    bool jit_ = false;
};

}  // namespace calserve::model::detail
