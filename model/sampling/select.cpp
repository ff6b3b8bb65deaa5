// Partial selection: threshold-scan top-k and the radix cutoff (see the header).
#include "model/sampling/select.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "model/sampling/kernels.hpp"

namespace calserve::model::select {

namespace {
constexpr auto by_better = [](const candidate& a, const candidate& b) { return better(a, b); };
}  // namespace

namespace {

// Shared by the FP32 and BF16 rows: `value(i)` reads token i as a float, `next(from, t)`
// finds the next token above t.
template <class Value, class Next>
void select_top_impl(std::size_t n, std::size_t k, std::vector<candidate>& out, Value value, Next next) {
    out.clear();
    if (k == 0) return;
    const std::size_t cap = std::max(2 * k, k + 64);
    out.reserve(cap);
    float threshold = -std::numeric_limits<float>::infinity();
    std::size_t i = next(0, threshold);
    while (i < n) {
        out.push_back({value(i), static_cast<std::int32_t>(i)});
        if (out.size() == cap) {
            // Later tokens have higher ids, so one equal to the k-th value loses: strict '>'.
            std::nth_element(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(k - 1), out.end(), by_better);
            out.resize(k);
            threshold = out[k - 1].value;
        }
        i = next(i + 1, threshold);
    }
    if (out.size() > k) {
        std::nth_element(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(k), out.end(), by_better);
        out.resize(k);
    }
    std::sort(out.begin(), out.end(), by_better);
}

}  // namespace

void select_top(std::span<const float> logits, std::size_t k, std::vector<candidate>& out, simd_level level) {
    select_top_impl(
        logits.size(), k, out, [&](std::size_t i) { return logits[i]; },
        [&](std::size_t from, float t) { return kernels::next_above(logits, from, t, level); });
}

void select_top(std::span<const bf16> logits, std::span<const std::int16_t> block_keys, std::size_t k,
                std::vector<candidate>& out, simd_level level) {
    select_top_impl(
        logits.size(), k, out, [&](std::size_t i) { return bf16_to_f32(logits[i]); },
        [&](std::size_t from, float t) { return kernels::next_above_bf16(logits, block_keys, from, t, level); });
}

namespace {

// Digits of a non-negative float's bits: exponent (8 bits, 256 buckets; eight
// interleaved tables of doubles stay in L1), then 11 and 12 mantissa bits over the
// ever shorter boundary lists.
struct level_spec {
    int shift;
    std::uint32_t mask;
    std::size_t buckets;
    std::size_t tables;  // a power of two
};
constexpr level_spec levels[3] = {{23, 0xff, 256, 8}, {12, 0x7ff, 2048, 1}, {0, 0xfff, 4096, 1}};

std::uint32_t key_of(float w) { return std::bit_cast<std::uint32_t>(w); }

// Histogram of one digit over the whole vocabulary (list == nullptr) or a list of
// token ids; interleaved tables break the store-to-load chains on hot buckets.
// The first level over the whole vocabulary by mass, with compile-time geometry: the
// hot loop of a flat top-p (load, shift, one add into one of eight tables).
void exponent_histogram(std::span<const float> w, std::vector<double>& hist) {
    constexpr level_spec spec = levels[0];
    hist.assign(spec.tables * spec.buckets, 0.0);
    double* h = hist.data();
    const float* p = w.data();
    const std::size_t n = w.size();
    std::size_t j = 0;
    for (; j + spec.tables <= n; j += spec.tables) {
        for (std::size_t t = 0; t < spec.tables; ++t) {
            const std::uint32_t digit = key_of(p[j + t]) >> spec.shift;
            h[t * spec.buckets + digit] += static_cast<double>(p[j + t]);
        }
    }
    for (; j < n; ++j) h[key_of(p[j]) >> spec.shift] += static_cast<double>(p[j]);
}

void histogram(std::span<const float> w, const kernels::index_list* list, level_spec spec, measure by,
               std::vector<double>& hist) {
    if (list == nullptr && by == measure::mass && spec.shift == levels[0].shift) {
        exponent_histogram(w, hist);
        return;
    }
    hist.assign(spec.tables * spec.buckets, 0.0);
    const std::size_t len = list != nullptr ? list->size() : w.size();
    for (std::size_t j = 0; j < len; ++j) {
        const std::uint32_t i = list != nullptr ? (*list)[j] : static_cast<std::uint32_t>(j);
        const std::uint32_t digit = (key_of(w[i]) >> spec.shift) & spec.mask;
        hist[(j & (spec.tables - 1)) * spec.buckets + digit] += by == measure::mass ? static_cast<double>(w[i]) : 1.0;
    }
}

// Highest-first walk: the digit where the running total reaches `target`, adding the
// mass above it to `above`; -1 when the whole histogram stays short of the target.
int boundary_digit(const std::vector<double>& hist, level_spec spec, double target, double& above) {
    for (std::size_t d = spec.buckets; d-- > 0;) {
        double h = 0.0;
        for (std::size_t t = 0; t < spec.tables; ++t) h += hist[t * spec.buckets + d];
        if (above + h >= target) return static_cast<int>(d);
        above += h;
    }
    return -1;
}

// Keeps the tokens of one digit; returns true when they all share one weight (then
// the lower digits need no histogram: a frequent case with quantised logits).
bool compact(std::span<const float> w, const kernels::index_list* list, level_spec spec, std::uint32_t digit,
             kernels::index_list& out, simd_level level) {
    out.clear();
    const auto matches = [&](std::uint32_t i) { return ((key_of(w[i]) >> spec.shift) & spec.mask) == digit; };
    if (list != nullptr) {
        for (const std::uint32_t i : *list) {
            if (matches(i)) out.push_back(i);
        }
    } else {
        kernels::collect_digit(w, spec.shift, spec.mask, digit, out, level);
    }
    const std::uint32_t first = out.empty() ? 0 : key_of(w[out[0]]);
    return std::all_of(out.begin(), out.end(), [&](std::uint32_t i) { return key_of(w[i]) == first; });
}

}  // namespace

cutoff radix_cutoff(std::span<const float> weights, double target, measure by, radix_scratch& scratch,
                    simd_level level) {
    const std::size_t n = weights.size();
    if (n == 0) return keep_all(0);
    target = std::max(target, std::numeric_limits<double>::min());  // at least the best token
    double above = 0.0;
    scratch.list_a.reserve_tokens(n);
    scratch.list_b.reserve_tokens(n);
    const kernels::index_list* source = nullptr;
    kernels::index_list* sink = &scratch.list_a;
    for (const level_spec& spec : levels) {
        histogram(weights, source, spec, by, scratch.hist);
        const int digit = boundary_digit(scratch.hist, spec, target, above);
        if (digit < 0) return keep_all(n);
        const bool uniform = compact(weights, source, spec, static_cast<std::uint32_t>(digit), *sink, level);
        source = sink;
        sink = sink == &scratch.list_a ? &scratch.list_b : &scratch.list_a;
        if (uniform) break;
    }
    // All remaining tokens share one weight and are in ascending token order: the cut
    // is the c-th of them, c = ceil(missing / unit).
    if (source->empty()) return keep_all(n);
    const float w = weights[(*source)[0]];
    const double unit = by == measure::mass ? static_cast<double>(w) : 1.0;
    const double need = std::ceil((target - above) / unit);
    const std::size_t c = need <= 1.0 ? 1 : std::min(source->size(), static_cast<std::size_t>(need));
    return {w, (*source)[c - 1]};
}

}  // namespace calserve::model::select
