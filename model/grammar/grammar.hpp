#pragma once
//! The grammar engine for constrained decoding: a JSON Schema (OpenAI strict subset) or a
//! GBNF-like EBNF grammar -> per step, the set of vocabulary tokens whose bytes keep the
//! output a prefix of some sentence of the grammar. Pure computation; no actors, no I/O.
//!
//! Pipeline: `json_schema_to_ebnf` (schema -> EBNF text) -> `compile` (EBNF + vocabulary
//! -> `compiled`: rules flattened to byte-level terminals, plus per grammar position the
//! tokens accepted/rejected whatever the stack below, and the few context-dependent ones)
//! -> one `matcher` per request: `fill_mask` before sampling, `accept` after it.
//! docs/sampling.md ("Constrained decoding") has the grammar syntax, the schema subset,
//! the whitespace policy (compact: no whitespace outside strings) and the algorithm.
//!
//! Fault model: a grammar or schema it cannot compile is `invalid_argument` naming the
//! line:col (EBNF) or the JSON pointer of the schema node; nothing aborts on bad input.
//! A matcher whose parse would need more than k_max_stacks alternative stacks (a wildly
//! ambiguous grammar) stops: it allows only EOS and reports `overflowed()`.
//! Invariants: `vocabulary` and `compiled` are immutable once built and shared between
//! threads; a `matcher` belongs to one request (movable, not shared); `accept` of a token
//! the mask did not allow returns false and changes nothing; EOS ids are allowed exactly
//! when the grammar accepts the bytes so far.
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/result.hpp"

namespace calserve::model {
class tokenizer;
}

namespace calserve::model::grammar {

/// Distinct compiled grammars kept by a compile_cache (least recently used evicted).
inline constexpr std::size_t k_compile_cache_entries = 64;
/// Alternative parse stacks a matcher may carry at once; more means the grammar is too
/// ambiguous to follow (the matcher stops, see the fault model).
inline constexpr std::size_t k_max_stacks = 1024;
/// Largest bound of a repetition `x{m,n}` (and of minItems/maxItems/minLength/maxLength).
inline constexpr std::size_t k_max_repetition = 4096;
/// Rules after flattening (repetitions and groups add rules); beyond it compile refuses.
inline constexpr std::size_t k_max_rules = 1u << 16;
/// Per-matcher memo of whole masks by parse state (states repeat inside strings, lists).
inline constexpr std::size_t k_mask_memo_entries = 8;

/// The token byte strings of one tokenizer, sorted for prefix-sharing walks. Special /
/// added tokens never match grammar text; the EOS ids are allowed where the grammar accepts.
class vocabulary {
public:
    /// Added tokens never match grammar text, except those in `text_added` (e.g. a tool-call
    /// grammar may list `<tool_call>` so that the model's own id for it is allowed).
    static std::shared_ptr<const vocabulary> build(const tokenizer& tok, std::span<const std::int32_t> eos_ids,
                                                   std::span<const std::int32_t> text_added = {});
    /// For tests and tools: explicit token byte strings (index = id); `excluded` ids never match.
    static std::shared_ptr<const vocabulary> from_tokens(std::vector<std::string> tokens,
                                                         std::span<const std::int32_t> eos_ids,
                                                         std::span<const std::int32_t> excluded = {});

    std::size_t size() const { return bytes_.size(); }
    std::size_t mask_words() const { return (size() + 31) / 32; }
    std::string_view bytes(std::int32_t id) const { return bytes_[static_cast<std::size_t>(id)]; }
    /// True for tokens that take part in grammar text matching (not special, not empty).
    bool is_text(std::int32_t id) const { return text_[static_cast<std::size_t>(id)] != 0; }
    bool is_eos(std::int32_t id) const;
    std::span<const std::int32_t> eos_ids() const { return eos_; }
    /// Text token ids in byte-lexicographic order, and each one's common prefix length
    /// with its predecessor in that order.
    std::span<const std::int32_t> sorted() const { return sorted_; }
    std::span<const std::uint16_t> sorted_lcp() const { return lcp_; }
    /// First index in sorted() whose token starts with byte b (257 entries).
    std::span<const std::uint32_t> first_byte_start() const { return first_byte_start_; }

private:
    void index();
    std::vector<std::string> bytes_;
    std::vector<std::uint8_t> text_;
    std::vector<std::int32_t> eos_;
    std::vector<std::int32_t> sorted_;
    std::vector<std::uint16_t> lcp_;
    std::vector<std::uint32_t> first_byte_start_;
};

/// JSON Schema (OpenAI strict-mode subset) -> EBNF for `compile`. Errors name the JSON
/// pointer of the offending node: "/properties/tags/items: unsupported keyword 'not'".
result<std::string> json_schema_to_ebnf(std::string_view schema_json);
/// Any JSON object (compact, like the schema grammars).
std::string json_object_ebnf();

struct compiled;  // opaque; model/grammar/compiled.hpp

/// Compile statistics (for benchmarks and logs).
struct compile_stats {
    std::size_t rules = 0;
    std::size_t positions = 0;          // grammar positions (terminal element, sub-state)
    std::size_t context_dependent = 0;  // summed over positions
    std::size_t memory_bytes = 0;
};

/// GBNF-like EBNF: `name ::= ...`, "literals" with escapes, [classes] / [^negated],
/// `.`, ( groups ), `?` `*` `+` `{m}` `{m,}` `{m,n}`, `|`, `#` comments; root rule `root`.
/// Errors: invalid_argument with "line:col: ...".
result<std::shared_ptr<const compiled>> compile(std::string_view ebnf, std::shared_ptr<const vocabulary> vocab);
compile_stats stats(const compiled& c);

enum class grammar_kind : std::uint8_t { ebnf, json_schema, json_object };

/// Thread-safe bounded LRU of compiled grammars keyed by (kind, text).
class compile_cache {
public:
    explicit compile_cache(std::shared_ptr<const vocabulary> vocab, std::size_t capacity = k_compile_cache_entries);
    /// json_object ignores `text`. Failures are not cached.
    result<std::shared_ptr<const compiled>> get(grammar_kind kind, std::string_view text);
    std::size_t size() const;
    std::uint64_t hits() const;
    std::uint64_t misses() const;
    const std::shared_ptr<const vocabulary>& vocab() const { return vocab_; }

private:
    struct entry {
        std::string key;
        std::shared_ptr<const compiled> value;
    };
    std::shared_ptr<const vocabulary> vocab_;
    std::size_t capacity_;
    mutable std::mutex mutex_;
    std::list<entry> lru_;  // front = most recent
    std::unordered_map<std::size_t, std::vector<std::list<entry>::iterator>> index_;  // hash -> entries
    std::uint64_t hits_ = 0;
    std::uint64_t misses_ = 0;
};

struct matcher_state;  // model/grammar/compiled.hpp

/// One request's parse: the mask before each step, the advance after it.
class matcher {
public:
    explicit matcher(std::shared_ptr<const compiled> grammar);
    ~matcher();
    matcher(matcher&&) noexcept;
    matcher& operator=(matcher&&) noexcept;

    std::size_t vocab_size() const;
    std::size_t mask_words() const;
    /// words.size() == mask_words(); bit (i % 32) of words[i / 32] set iff token i is allowed.
    void fill_mask(std::span<std::uint32_t> words);
    /// Advance by one token; false (and no change) when it is not allowed here.
    bool accept(std::int32_t token);
    /// The bytes so far form a complete sentence (EOS allowed).
    bool accepting() const;
    /// Accepting and nothing can follow: the request must stop.
    bool terminated() const;
    /// The parse needed more than k_max_stacks stacks; only EOS is allowed from then on.
    bool overflowed() const;
    std::size_t bytes_consumed() const;

private:
    std::unique_ptr<matcher_state> s_;
};

}  // namespace calserve::model::grammar
