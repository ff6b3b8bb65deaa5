// The sampler pipeline (see model/sampling/sampling.hpp for the order and the contracts).
#include "model/sampling/sampling.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>

#include "model/sampling/kernels.hpp"

namespace calserve::model {
namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();
// 1/T for a vanishing temperature: large enough that every non-maximal token gets
// weight 0, small enough that 0 * it stays 0 for the maximum.
constexpr float inv_temperature_max = 1e30f;

error_info bad(const std::string& what) { return make_error(status::invalid_argument, "sampling: " + what); }

bool tokens_in_range(std::span<const std::int32_t> tokens, std::size_t vocab) {
    return std::all_of(tokens.begin(), tokens.end(),
                       [vocab](std::int32_t t) { return t >= 0 && static_cast<std::size_t>(t) < vocab; });
}

bool wants_logprobs(const sampling_params& p) { return p.logprobs || p.top_logprobs > 0; }

void_result check_mask(std::span<const std::uint32_t> allowed, std::size_t vocab) {
    if (!allowed.empty() && allowed.size() != (vocab + 31) / 32) return bad("token mask size does not match the vocabulary");
    return {};
}

float f32_value(float v) { return v; }
float bf16_value(bf16 v) { return bf16_to_f32(v); }

// A mask word with at least this many allowed tokens is reduced without a branch per
// bit (inside a JSON string most words miss only a few tokens, e.g. those with a quote,
// so full-word runs are short and a branch per set bit cost ~45 ns per word).
constexpr int k_branchless_word_bits = 8;

// Maximum over the allowed values of one 32-token word; -inf when none is above -inf
// (NaN and disallowed lanes count as -inf). Fixed trip counts, no data-dependent
// branches: the compiler unrolls and vectorises both loops.
template <class T, class Value>
float masked_word_max(const T* p, std::uint32_t bits, Value value) {
    float v[32];
    for (int j = 0; j < 32; ++j) {
        const float x = value(p[j]);
        v[j] = ((bits >> j) & 1u) != 0 && x > neg_inf ? x : neg_inf;
    }
    for (int s = 16; s > 0; s /= 2) {
        for (int j = 0; j < s; ++j) v[j] = v[j + s] > v[j] ? v[j + s] : v[j];
    }
    return v[0];
}

// Whether most of the vocabulary looks allowed, judged from a few evenly spaced words
// (only picks the faster route; both give the same token).
bool wide_mask(std::span<const std::uint32_t> allowed) {
    constexpr std::size_t k_probes = 16;
    if (allowed.size() < k_probes) return false;
    int set = 0;
    for (std::size_t k = 0; k < k_probes; ++k) set += std::popcount(allowed[k * allowed.size() / k_probes]);
    return set >= static_cast<int>(k_probes) * 16;
}

// Greedy within a token mask: lowest allowed id of the maximum, NaN never chosen; -1
// when no allowed token is above -inf. An allowed unmasked argmax answers at once. Runs of fully allowed words (most of the
// vocabulary inside a JSON string) go to the dense SIMD argmax; mostly allowed words
// are reduced branch-free; sparse words visit only their set bits. Allocates nothing.
template <class T, class Value, class Dense>
std::int32_t masked_argmax(std::span<const T> logits, std::span<const std::uint32_t> allowed, Value value,
                           Dense dense) {
    // The unmasked maximum is usually allowed (a wide mask, or a model that agrees with
    // the grammar): then it is the answer, found by one dense SIMD pass.
    if (const auto top = wide_mask(allowed) ? dense(logits) : -1; top >= 0) {
        const auto t = static_cast<std::size_t>(top);
        if (t / 32 < allowed.size() && ((allowed[t / 32] >> (t % 32)) & 1u) != 0 && value(logits[t]) > neg_inf) return top;
    }
    std::int32_t best = -1;
    float best_value = neg_inf;
    auto consider = [&](std::size_t i) {
        const float v = value(logits[i]);
        if (v > best_value) {
            best_value = v;
            best = static_cast<std::int32_t>(i);
        }
    };
    for (std::size_t w = 0; w < allowed.size();) {
        if (allowed[w] == ~std::uint32_t{0} && (w + 1) * 32 <= logits.size()) {
            std::size_t end = w + 1;
            while (end < allowed.size() && allowed[end] == ~std::uint32_t{0} && (end + 1) * 32 <= logits.size()) ++end;
            const auto run = logits.subspan(w * 32, (end - w) * 32);
            const auto i = dense(run);
            if (i >= 0) consider(w * 32 + static_cast<std::size_t>(i));
            w = end;
            continue;
        }
        if (std::popcount(allowed[w]) >= k_branchless_word_bits && (w + 1) * 32 <= logits.size()) {
            const T* p = logits.data() + w * 32;
            const float m = masked_word_max(p, allowed[w], value);
            if (m > best_value) {  // first allowed id of that maximum (rare after the first words)
                for (std::uint32_t bits = allowed[w]; bits != 0; bits &= bits - 1) {
                    const auto j = static_cast<std::size_t>(std::countr_zero(bits));
                    if (value(p[j]) == m) {
                        best_value = m;
                        best = static_cast<std::int32_t>(w * 32 + j);
                        break;
                    }
                }
            }
            ++w;
            continue;
        }
        for (std::uint32_t bits = allowed[w]; bits != 0; bits &= bits - 1) {
            const std::size_t i = w * 32 + static_cast<std::size_t>(std::countr_zero(bits));
            if (i >= logits.size()) break;
            consider(i);
        }
        ++w;
    }
    return best;
}

// Mass the top-p prefix must reach; positive whenever top_p < 1 (the slack only applies
// when it leaves most of p, so a tiny top_p still means "the best token").
double top_p_target(float top_p, double total) {
    const double p = static_cast<double>(top_p);
    return (p > 2.0 * top_p_slack ? p - top_p_slack : p) * total;
}

// A candidate's weight, and a token's logprob: one expression each, shared by the
// whole-row and the top-k paths so both round alike.
float weight_of(float logit, float max, float inv_t) { return std::exp((logit - max) * inv_t); }
float logprob_of(float logit, float max, float inv_t, double log_z) {
    return static_cast<float>(static_cast<double>((logit - max) * inv_t) - log_z);
}

}  // namespace

void_result validate(const sampling_params& p, std::size_t vocab, token_history history) {
    if (vocab == 0) return bad("empty vocabulary");
    if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) return bad("temperature must be finite and >= 0");
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return bad("top_p must be in (0, 1]");
    if (p.top_k < 0) return bad("top_k must be >= 0");
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return bad("min_p must be in [0, 1]");
    if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
        return bad("repetition_penalty must be finite and > 0");
    }
    if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty)) return bad("penalties must be finite");
    if (p.top_logprobs < 0 || static_cast<std::size_t>(p.top_logprobs) > max_top_logprobs) {
        return bad("top_logprobs must be in [0, " + std::to_string(max_top_logprobs) + "]");
    }
    for (const auto& [token, bias] : p.logit_bias) {
        if (token < 0 || static_cast<std::size_t>(token) >= vocab) return bad("logit_bias token out of range");
        if (std::isnan(bias)) return bad("logit_bias value is NaN");
    }
    if (!tokens_in_range(history.prompt, vocab) || !tokens_in_range(history.generated, vocab)) {
        return bad("history token out of range");
    }
    return {};
}

float inverse_temperature(const sampling_params& p) {
    return p.greedy() ? 1.0f : std::min(1.0f / p.temperature, inv_temperature_max);
}

bool top_k_determines(const sampling_params& p, std::size_t k, std::size_t vocab) {
    if (!p.logit_bias.empty() || p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f ||
        p.presence_penalty != 0.0f)
        return false;
    if (k == 0 || p.top_logprobs < 0 || static_cast<std::size_t>(p.top_logprobs) > k) return false;
    if (p.greedy()) return true;
    const auto top_k = static_cast<std::size_t>(std::max(p.top_k, 0));
    return top_k > 0 && top_k <= k && top_k < vocab && top_k <= sparse_top_k_max;
}

bool sampler::needs_edits(const sampling_params& p) {
    return !p.logit_bias.empty() || p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f ||
           p.presence_penalty != 0.0f;
}

result<sample_result> sampler::sample(std::span<const float> logits, const sampling_params& params,
                                      token_history history, request_rng& rng, std::span<const std::uint32_t> allowed) {
    if (auto ok = validate(params, logits.size(), history); !ok) return ok.error();
    if (auto ok = check_mask(allowed, logits.size()); !ok) return ok.error();
    if (params.greedy() && !needs_edits(params) && !wants_logprobs(params)) {
        sample_result out;
        out.token = allowed.empty() ? argmax_f32(logits, level_)
                                    : masked_argmax(logits, allowed, f32_value, [this](std::span<const float> run) {
                                          return argmax_f32(run, level_);
                                      });
        if (out.token < 0) return bad("every token is masked to -inf");
        out.support = 1;
        return out;
    }
    logits_.assign(logits.begin(), logits.end());
    apply_mask(allowed);
    apply_edits(params, history);
    return sample_prepared(params, rng);
}

result<sample_result> sampler::sample(std::span<const bf16> logits, const sampling_params& params,
                                      token_history history, request_rng& rng, std::span<const std::uint32_t> allowed) {
    if (auto ok = validate(params, logits.size(), history); !ok) return ok.error();
    if (auto ok = check_mask(allowed, logits.size()); !ok) return ok.error();
    if (params.greedy() && !needs_edits(params) && !wants_logprobs(params)) {
        sample_result out;  // the fused path: one pass over the BF16 bytes, nothing allocated
        out.token = allowed.empty() ? argmax_bf16(logits, level_)
                                    : masked_argmax(logits, allowed, bf16_value, [this](std::span<const bf16> run) {
                                          return argmax_bf16(run, level_);
                                      });
        if (out.token < 0) return bad("every token is masked to -inf");
        out.support = 1;
        return out;
    }
    if (reads_bf16_directly(params, logits.size(), allowed)) return sample_top_p_bf16(logits, params, rng);
    logits_.resize(logits.size());
    bf16_to_f32(logits, logits_, level_);
    apply_mask(allowed);
    apply_edits(params, history);
    return sample_prepared(params, rng);
}

// Top-p (with or without min-p) and nothing that edits or reads the logits later: the
// sampled step of a plain chat request. It needs the weights only, so it reads the BF16
// row directly: no FP32 copy, one pass fewer.
bool sampler::reads_bf16_directly(const sampling_params& p, std::size_t vocab, std::span<const std::uint32_t> allowed) {
    const bool top_k_on = p.top_k > 0 && static_cast<std::size_t>(p.top_k) < vocab;
    return !p.greedy() && p.top_p < 1.0f && !top_k_on && allowed.empty() && !needs_edits(p) && !wants_logprobs(p);
}

// sample_prepared + sample_dense for that case, reading the BF16 row; every value it
// computes (max, weights, block sums, candidates) equals the FP32 path's bit for bit.
result<sample_result> sampler::sample_top_p_bf16(std::span<const bf16> logits, const sampling_params& params,
                                                 request_rng& rng) {
    block_keys_.resize(kernels::block_count(logits.size()));
    const kernels::bf16_scan scan = kernels::scan_max_bf16(logits, block_keys_, level_);
    if (!scan.finite) return make_error(status::logits_nan, "sampling: NaN or +inf in the logits");
    if (scan.max == neg_inf) return bad("every token is masked to -inf");
    const float inv_t = std::min(1.0f / params.temperature, inv_temperature_max);
    const double u = rng.next_unit();
    const std::size_t n = logits.size();
    weights_.resize(n);
    blocks_.resize(kernels::block_count(n));
    const kernels::weight_sum sum =
        kernels::exp_weights_bf16(logits, scan.max, scan.min, inv_t, weights_, blocks_, level_);
    sample_result out;
    cut_and_draw(params, sum, false, u, out, logits);
    return out;
}

void sampler::apply_mask(std::span<const std::uint32_t> allowed) {
    if (allowed.empty()) return;
    const std::size_t n = logits_.size();
    for (std::size_t w = 0; w < allowed.size(); ++w) {
        const std::uint32_t bits = allowed[w];
        if (bits == ~0u) continue;
        const std::size_t end = std::min(n, w * 32 + 32);
        for (std::size_t i = w * 32; i < end; ++i) {
            if ((bits >> (i - w * 32) & 1u) == 0) logits_[i] = neg_inf;
        }
    }
}

void sampler::apply_edits(const sampling_params& p, token_history history) {
    const std::size_t n = logits_.size();
    for (const auto& [token, bias] : p.logit_bias) {
        float& l = logits_[static_cast<std::size_t>(token)];
        if (l != neg_inf) l += bias;  // a masked token stays masked, whatever its bias
    }
    if (p.repetition_penalty != 1.0f) {
        // HF semantics: each distinct token of prompt + generated is penalised once.
        if (seen_.size() != n) seen_.assign(n, 0);
        for (const auto tokens : {history.prompt, history.generated}) {
            for (const std::int32_t t : tokens) {
                auto& mark = seen_[static_cast<std::size_t>(t)];
                if (mark != 0) continue;
                mark = 1;
                float& l = logits_[static_cast<std::size_t>(t)];
                l = l < 0.0f ? l * p.repetition_penalty : l / p.repetition_penalty;
            }
        }
        for (const auto tokens : {history.prompt, history.generated}) {
            for (const std::int32_t t : tokens) seen_[static_cast<std::size_t>(t)] = 0;
        }
    }
    if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
        // OpenAI semantics over generated tokens: l -= count * frequency + (count > 0) * presence.
        if (counts_.size() != n) counts_.assign(n, 0);
        for (const std::int32_t t : history.generated) ++counts_[static_cast<std::size_t>(t)];
        for (const std::int32_t t : history.generated) {
            auto& count = counts_[static_cast<std::size_t>(t)];
            if (count == 0) continue;
            logits_[static_cast<std::size_t>(t)] -=
                static_cast<float>(count) * p.frequency_penalty + p.presence_penalty;
            count = 0;
        }
    }
}

result<sample_result> sampler::sample_prepared(const sampling_params& params, request_rng& rng) {
    const kernels::max_scan scan = kernels::scan_max(logits_, level_);
    if (!scan.finite) return make_error(status::logits_nan, "sampling: NaN or +inf in the logits");
    if (scan.max == neg_inf) return bad("every token is masked to -inf");
    sample_result out;
    if (params.greedy()) {
        out.token = argmax_f32(logits_, level_);
        out.support = 1;
        if (wants_logprobs(params)) {
            fill_logprobs(params, scan.max, 1.0f, std::log(kernels::exp_sum(logits_, scan.max, 1.0f, level_)), out);
        }
        return out;
    }
    const float inv_t = inverse_temperature(params);
    const double u = rng.next_unit();
    const std::size_t n = logits_.size();
    const std::size_t k = params.top_k > 0 && static_cast<std::size_t>(params.top_k) < n
                              ? static_cast<std::size_t>(params.top_k) : 0;
    if (k > 0 && k <= sparse_top_k_max) {
        sample_sparse(params, scan.max, inv_t, u, out);
        if (wants_logprobs(params)) {
            fill_logprobs(params, scan.max, inv_t, std::log(kernels::exp_sum(logits_, scan.max, inv_t, level_)), out);
        }
    } else {
        double total_all = 0.0;
        sample_dense(params, scan.max, inv_t, u, out, total_all);
        if (wants_logprobs(params)) fill_logprobs(params, scan.max, inv_t, std::log(total_all), out);
    }
    return out;
}

// top-k <= sparse_top_k_max: everything happens on the k sorted candidates.
void sampler::sample_sparse(const sampling_params& params, float max, float inv_t, double u, sample_result& out) {
    select::select_top(logits_, static_cast<std::size_t>(params.top_k), candidates_, level_);
    double total = 0.0;
    for (auto& c : candidates_) {
        c.value = weight_of(c.value, max, inv_t);  // logits -> weights, order unchanged
        total += c.value;
    }
    const double target = params.top_p < 1.0f ? top_p_target(params.top_p, total) : 0.0;
    draw_from_sorted(candidates_, target, params.min_p, u, out);
}

// `list` holds weights, best first. Keeps its shortest prefix reaching `target` (all of
// it when target <= 0), then drops the tail below min_p (list[0] has weight 1), draws.
void sampler::draw_from_sorted(std::span<const select::candidate> list, double target, float min_p, double u,
                               sample_result& out) {
    std::size_t len = list.size();
    if (target > 0.0) {
        double cum = 0.0;
        for (std::size_t j = 0; j < list.size(); ++j) {
            cum += list[j].value;
            if (cum >= target) {
                len = j + 1;
                break;
            }
        }
    }
    while (len > 1 && list[len - 1].value < min_p) --len;
    double kept = 0.0;
    out.support = 0;
    for (std::size_t j = 0; j < len; ++j) {
        kept += list[j].value;
        out.support += list[j].value > 0.0f ? 1 : 0;
    }
    const double r = u * kept;
    double cum = 0.0;
    out.token = list[0].token;
    for (std::size_t j = 0; j < len; ++j) {
        if (list[j].value <= 0.0f) continue;
        out.token = list[j].token;  // rounding fallback: the last positive one
        cum += list[j].value;
        if (cum > r) break;
    }
}

// No top-k or a large one: weights over the whole vocabulary, cutoffs by partial
// selection, then a draw through the per-block sums (or from the candidate list when
// a short one already holds the nucleus).
void sampler::sample_dense(const sampling_params& params, float max, float inv_t, double u, sample_result& out,
                           double& total_all) {
    const std::size_t n = logits_.size();
    weights_.resize(n);
    blocks_.resize(kernels::block_count(n));
    kernels::weight_sum sum = kernels::exp_weights(logits_, max, inv_t, weights_, blocks_, level_);
    total_all = sum.total;
    const bool top_k_on = params.top_k > 0 && static_cast<std::size_t>(params.top_k) < n;
    if (top_k_on) {
        const auto cut =
            select::radix_cutoff(weights_, static_cast<double>(params.top_k), select::measure::count, radix_, level_);
        sum = kernels::apply_keep_rule(weights_, 0.0f, cut.weight, cut.index, blocks_, level_);
    }
    cut_and_draw(params, sum, top_k_on, u, out, {});
}

// top-p and min-p over the weights (after top-k), then the draw. `raw`: the BF16 row
// when logits_ was not filled (the candidates are then selected from it).
void sampler::cut_and_draw(const sampling_params& params, kernels::weight_sum sum, bool top_k_on, double u,
                           sample_result& out, std::span<const bf16> raw) {
    select::cutoff cut = select::keep_all(weights_.size());
    if (params.top_p < 1.0f) {
        const double target = top_p_target(params.top_p, sum.total);
        if (!top_k_on && nucleus_in_candidates(target, raw)) {
            draw_from_sorted(top_, target, params.min_p, u, out);
            return;
        }
        cut = select::radix_cutoff(weights_, target, select::measure::mass, radix_, level_);
    }
    if (params.top_p < 1.0f || params.min_p > 0.0f) {
        sum = kernels::apply_keep_rule(weights_, params.min_p, cut.weight, cut.index, blocks_, level_);
    }
    out.support = sum.positive;
    out.token = draw_dense(u, sum.total);
}

// Peaked distributions: a few dozen candidates usually hold the top-p mass. top_ gets
// the candidates as weights in keep-rule order (weight, then token); it is trusted only
// when the prefix ends strictly above its weakest entry (no outsider can tie with it)
// or when it holds every token above -inf.
bool sampler::nucleus_in_candidates(double target, std::span<const bf16> raw) {
    // Bound: each weight is at most 1, and the best k/8 tokens hold at least 1/8 of the
    // best k's mass, so a round that cannot reach the target is skipped.
    double bound = 64.0;
    for (std::size_t k = 64; k <= geometric_top_p_max && bound >= target; k *= 8) {
        if (raw.empty()) {
            select::select_top(logits_, k, candidates_, level_);
        } else {
            select::select_top(raw, block_keys_, k, candidates_, level_);
        }
        top_.clear();
        for (const auto& c : candidates_) top_.push_back({weights_[static_cast<std::size_t>(c.token)], c.token});
        std::sort(top_.begin(), top_.end(), [](const auto& a, const auto& b) { return select::better(a, b); });
        const bool complete = candidates_.size() < k;
        double cum = 0.0;
        for (const auto& c : top_) {
            cum += c.value;
            if (cum < target) continue;
            if (complete || c.value > top_.back().value) return true;
            break;
        }
        if (complete) return true;  // short of the target only by rounding: keep them all
        bound = 8.0 * cum;
    }
    return false;
}

std::int32_t sampler::draw_dense(double u, double total) const {
    const double r = u * total;
    double cum = 0.0;
    const std::size_t n = weights_.size();
    for (std::size_t b = 0; b < blocks_.size(); ++b) {
        if (cum + blocks_[b] <= r) {
            cum += blocks_[b];
            continue;
        }
        const std::size_t begin = b * kernels::weight_block;
        const std::size_t end = std::min(n, begin + kernels::weight_block);
        std::size_t last = end;
        for (std::size_t i = begin; i < end; ++i) {
            if (weights_[i] <= 0.0f) continue;
            last = i;
            cum += weights_[i];
            if (cum > r) return static_cast<std::int32_t>(i);
        }
        if (last != end) return static_cast<std::int32_t>(last);  // block sum rounding
    }
    for (std::size_t i = n; i-- > 0;) {  // r reached the total by rounding: the last candidate
        if (weights_[i] > 0.0f) return static_cast<std::int32_t>(i);
    }
    return 0;
}

result<double> sampler::summarise_top_k(std::span<const bf16> logits, const sampling_params& params,
                                        std::span<float> top_logits, std::span<std::int32_t> top_ids) {
    if (auto ok = validate(params, logits.size()); !ok) return ok.error();
    logits_.resize(logits.size());
    bf16_to_f32(logits, logits_, level_);
    const kernels::max_scan scan = kernels::scan_max(logits_, level_);
    if (!scan.finite) return make_error(status::logits_nan, "sampling: NaN or +inf in the logits");
    if (scan.max == neg_inf) return bad("every token is -inf");
    const std::size_t k = std::min(top_logits.size(), top_ids.size());
    select::select_top(logits_, k, candidates_, level_);
    for (std::size_t j = 0; j < k; ++j) {
        const bool have = j < candidates_.size();
        top_logits[j] = have ? candidates_[j].value : neg_inf;
        top_ids[j] = have ? candidates_[j].token : -1;
    }
    // As sample_prepared: the row's maximum, 1/T (1 when greedy), exp_sum over the row.
    return std::log(kernels::exp_sum(logits_, scan.max, inverse_temperature(params), level_));
}

result<sample_result> sampler::sample_top_k(const top_k_row& row, const sampling_params& params, std::size_t vocab,
                                            request_rng& rng) {
    if (auto ok = validate(params, vocab); !ok) return ok.error();
    const std::size_t k = std::min(row.logits.size(), row.ids.size());
    if (!top_k_determines(params, k, vocab)) return bad("the row's top " + std::to_string(k) + " do not determine this step");
    std::size_t n = 0;  // the head's entries above -inf (the rest is padding)
    while (n < k && row.ids[n] >= 0 && static_cast<std::size_t>(row.ids[n]) < vocab && row.logits[n] > neg_inf) ++n;
    if (n == 0 || !std::isfinite(row.logits[0]) || !std::isfinite(row.log_z))
        return make_error(status::logits_nan, "sampling: the top-k row holds no finite logit");
    const float max = row.logits[0];
    const float inv_t = inverse_temperature(params);
    sample_result out;
    std::size_t chosen = 0;  // the token's place in the row
    if (params.greedy()) {
        out.token = row.ids[0];
        out.support = 1;
    } else {  // sample_sparse on the same candidates: the top-k prefix of the head's list
        const double u = rng.next_unit();
        const std::size_t take = std::min(n, static_cast<std::size_t>(params.top_k));
        candidates_.resize(take);
        double total = 0.0;
        for (std::size_t j = 0; j < take; ++j) {
            candidates_[j] = {weight_of(row.logits[j], max, inv_t), row.ids[j]};
            total += candidates_[j].value;
        }
        const double target = params.top_p < 1.0f ? top_p_target(params.top_p, total) : 0.0;
        draw_from_sorted(candidates_, target, params.min_p, u, out);
        while (chosen < take && row.ids[chosen] != out.token) ++chosen;
    }
    if (params.logprobs) out.logprob = logprob_of(row.logits[chosen], max, inv_t, row.log_z);
    out.top_count = std::min(n, static_cast<std::size_t>(std::max(params.top_logprobs, 0)));
    for (std::size_t j = 0; j < out.top_count; ++j)
        out.top[j] = {row.ids[j], logprob_of(row.logits[j], max, inv_t, row.log_z)};
    return out;
}

std::size_t sampler::scratch_bytes() const {
    return logits_.capacity() * sizeof(float) + weights_.capacity() * sizeof(float) +
           blocks_.capacity() * sizeof(float) + block_keys_.capacity() * sizeof(std::int16_t) +
           counts_.capacity() * sizeof(std::uint32_t) + seen_.capacity() +
           (candidates_.capacity() + top_.capacity()) * sizeof(select::candidate) +
           radix_.hist.capacity() * sizeof(double) +
           radix_.list_a.capacity_bytes() + radix_.list_b.capacity_bytes();
}

result<sample_result> sampler::score(std::span<const bf16> logits, std::int32_t target, std::size_t top_n) {
    if (target >= std::int32_t(logits.size()) || target < -1 || top_n > max_top_logprobs)
        return bad("scoring: target token or top_n out of range");
    logits_.resize(logits.size());
    bf16_to_f32(logits, logits_, level_);
    const kernels::max_scan scan = kernels::scan_max(logits_, level_);
    if (!scan.finite) return make_error(status::logits_nan, "sampling: NaN or +inf in the logits");
    if (scan.max == neg_inf) return bad("every token is -inf");
    sampling_params params;  // greedy: what sample_prepared's greedy branch fills
    params.temperature = 0.0f;
    params.logprobs = target >= 0;
    params.top_logprobs = static_cast<std::int32_t>(top_n);
    sample_result out;
    out.token = std::max(target, 0);
    fill_logprobs(params, scan.max, 1.0f, std::log(kernels::exp_sum(logits_, scan.max, 1.0f, level_)), out);
    out.token = target;
    return out;
}

void sampler::fill_logprobs(const sampling_params& params, float max, float inv_t, double log_z, sample_result& out) {
    const auto logprob = [&](float logit) { return logprob_of(logit, max, inv_t, log_z); };
    if (params.logprobs) out.logprob = logprob(logits_[static_cast<std::size_t>(out.token)]);
    if (params.top_logprobs <= 0) return;
    select::select_top(logits_, static_cast<std::size_t>(params.top_logprobs), top_, level_);
    out.top_count = top_.size();
    for (std::size_t j = 0; j < top_.size(); ++j) out.top[j] = {top_[j].token, logprob(top_[j].value)};
}

}  // namespace calserve::model
