// N-gram prompt lookup (drafter.hpp).
#include "model/speculative/drafter.hpp"

#include <algorithm>

namespace calserve::model::speculative {

std::string_view to_string(method m) { return m == method::ngram ? "ngram" : "none"; }

bool parse_method(std::string_view text, method& out) {
    if (text == "none") out = method::none;
    else if (text == "ngram") out = method::ngram;
    else return false;
    return true;
}

namespace {

// The continuation of the newest earlier occurrence of the last `n` tokens: a full run of
// `k` tokens if some occurrence has one, else the longest found. Searches [from, end - n).
std::vector<token_id> lookup(std::span<const token_id> seq, std::int64_t n, std::int64_t k, std::int64_t from) {
    const auto len = static_cast<std::int64_t>(seq.size());
    const auto suffix = seq.subspan(static_cast<std::size_t>(len - n));
    std::int64_t best_at = -1, best_run = 0;
    for (std::int64_t start = len - n - 1; start >= from; --start) {
        if (!std::equal(suffix.begin(), suffix.end(), seq.begin() + start)) continue;
        const std::int64_t run = std::min(k, len - (start + n));
        if (run > best_run) {
            best_run = run;
            best_at = start + n;
        }
        if (run == k) break;
    }
    if (best_at < 0) return {};
    return {seq.begin() + best_at, seq.begin() + best_at + best_run};
}

}  // namespace

std::vector<token_id> ngram_drafter::propose(std::span<const token_id> sequence, std::int64_t max_drafts) {
    const auto len = static_cast<std::int64_t>(sequence.size());
    if (max_drafts <= 0 || options_.n_min < 1) return {};
    const std::int64_t from = std::max<std::int64_t>(0, len - k_ngram_window);
    for (std::int64_t n = std::min(options_.n_max, len - 1); n >= options_.n_min; --n) {
        auto found = lookup(sequence, n, max_drafts, from);
        if (!found.empty()) return found;
    }
    return {};
}

std::unique_ptr<drafter> make_drafter(const drafter_options& options) {
    if (options.kind == method::ngram) return std::make_unique<ngram_drafter>(options.ngram);
    return nullptr;
}

}  // namespace calserve::model::speculative
