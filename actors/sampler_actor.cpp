#include "actors/sampler_actor.hpp"

#include <algorithm>

#include "actors/chip_session_actor.hpp"
#include "metrics/metrics.hpp"
#include "device/fault_points.hpp"
#include "model/core/thread_pool.hpp"

namespace calserve::actors {

sampler_actor::sampler_actor(runtime& rt, sampler_options options, metrics::calserve_metrics* metrics)
    : actor(rt, "sampler"), options_(std::move(options)), metrics_(metrics) {
    options_.threads = std::max(1, options_.threads);
    if (options_.threads > 1) pool_ = std::make_unique<model::thread_pool>(options_.threads);
    samplers_.resize(std::size_t(options_.threads));
}

sampler_actor::~sampler_actor() = default;

void sampler_actor::on_message(sampler_message& msg) {
    std::visit([this](auto& m) { on(m); }, msg);
}

namespace {
// The mask for this step of a constrained row: only </think> once the reasoning
// budget is spent, nothing inside the think block, else the grammar's. Tokens past
// the grammar's vocabulary (model rows may be wider than the tokenizer) stay off.
std::span<const std::uint32_t> constraint_mask(sequence_constraint& c, std::size_t vocab) {
    const std::size_t words = (vocab + 31) / 32;
    if (c.thinking) {
        if (c.reasoning_budget < 0 || c.reasoning_tokens < c.reasoning_budget || c.think_end < 0) return {};
        c.mask.assign(words, 0);
        if (std::size_t(c.think_end) < vocab) c.mask[std::size_t(c.think_end) / 32] |= 1u << (c.think_end % 32);
        return c.mask;
    }
    if (!c.matcher) return {};
    c.mask.assign(std::max(words, c.matcher->mask_words()), 0);
    c.matcher->fill_mask(std::span<std::uint32_t>(c.mask).first(c.matcher->mask_words()));
    if (vocab % 32 != 0 && words <= c.mask.size()) c.mask[words - 1] &= (1u << (vocab % 32)) - 1;
    return std::span<const std::uint32_t>(c.mask).first(words);
}

// Advances the constraint by the sampled token; an error when the grammar refuses
// a token its own mask allowed (an engine bug: the request fails, not the process).
std::optional<error_info> constraint_accept(sequence_constraint& c, token_id token) {
    if (c.thinking) {
        ++c.reasoning_tokens;
        if (token == c.think_end) c.thinking = false;
        return std::nullopt;
    }
    if (!c.matcher) return std::nullopt;
    if (!c.matcher->accept(token)) {
        return make_error(status::internal, "grammar refused token " + std::to_string(token) + " its mask allowed");
    }
    c.ended = c.matcher->terminated();
    return std::nullopt;
}

// Row r of the head's top-k output (mode top_k): no constraint, no history needed.
model::top_k_row top_k_row_of(const job_context& job, std::size_t r) {
    const auto k = std::size_t(job.head_k);
    return {std::span<const float>(job.topk_logits).subspan(r * k, k),
            std::span<const std::int32_t>(job.topk_ids).subspan(r * k, k), job.topk_log_z[r]};
}

void sample_rows(job_context& job, std::size_t begin, std::size_t end, model::sampler& sampler) {
    const auto vocab = std::size_t(job.vocab);
    std::span<const model::bf16> all(reinterpret_cast<const model::bf16*>(job.logits.data()), job.logits.size() / 2);
    for (std::size_t r = begin; r < end; ++r) {
        if (job.drawn(r)) continue;  // drawn by the device's sampling head
        auto& seq = *job.rows[r];
        std::span<const std::int32_t> tokens(seq.tokens);
        model::token_history history{tokens.first(std::size_t(seq.prompt_len)), tokens.subspan(std::size_t(seq.prompt_len))};
        std::span<const std::uint32_t> allowed;
        if (seq.constraint) allowed = constraint_mask(*seq.constraint, vocab);
        auto picked = job.mode(r) == device::head_mode::top_k
                          ? sampler.sample_top_k(top_k_row_of(job, r), seq.params, vocab, seq.rng)
                          : sampler.sample(all.subspan(r * vocab, vocab), seq.params, history, seq.rng, allowed);
        if (!picked) {
            job.picks[r] = picked.error();
            continue;
        }
        if (seq.constraint) {
            if (auto e = constraint_accept(*seq.constraint, picked->token)) {
                job.picks[r] = *e;
                continue;
            }
        }
        std::vector<token_logprob> picks;
        picks.reserve(1 + picked->top_count);
        picks.push_back({picked->token, picked->logprob});
        for (const auto& t : picked->top_logprobs()) picks.push_back({t.token, t.logprob});
        seq.tokens.push_back(picked->token);
        job.picks[r] = std::move(picks);
    }
}
}  // namespace

void sample_batch(job_context& job, std::span<model::sampler> samplers, model::thread_pool* pool) {
    const std::size_t rows = job.rows.size();
    if (job.picks.size() != rows) job.picks.assign(rows, make_error(status::internal, "row not sampled"));
    const std::size_t shares = std::min<std::size_t>(samplers.size(), rows);
    if (shares <= 1 || !pool) {
        sample_rows(job, 0, rows, samplers[0]);
        return;
    }
    // Share i takes rows [i*rows/shares, (i+1)*rows/shares) with scratch sampler i; a row's
    // result does not depend on its share.
    const auto work = std::int64_t(rows) * job.vocab;
    pool->parallel_for(std::int64_t(shares), 1, work, [&](std::int64_t b, std::int64_t e) {
        for (auto i = std::size_t(b); i < std::size_t(e); ++i)
            sample_rows(job, i * rows / shares, (i + 1) * rows / shares, samplers[i]);
    });
}

std::chrono::nanoseconds sampler_actor::stall_of(const job_context& job) {
    if (!options_.faults || !options_.faults->any_armed()) return {};
    for (const auto& row : job.rows) {
        auto fire = options_.faults->check(device::fault_point::sampler_stall, {0, {}, row->seq, {}});
        if (!fire) continue;
        auto delay = std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::duration<double, std::milli>(fire->delay_ms));
        return std::clamp<std::chrono::nanoseconds>(delay, std::chrono::nanoseconds{0}, k_sampler_stall_max);
    }
    return {};
}

void sampler_actor::on(sm_sample& m) {
    auto& job = *m.job;
    auto start = rt().now();
    sample_batch(job, samplers_, pool_.get());
    job.t_sampled = rt().now();
    if (metrics_) {
        metrics_->phase_seconds(metrics::phase::sample).observe(std::chrono::duration<double>(job.t_sampled - start).count());
    }
    auto stall = stall_of(job);
    if (stall.count() > 0) {
        start_timer(stall, [this, job = m.job] { (void)session_.tell(cs_sampled{job}, id()); });
        return;
    }
    (void)session_.tell(cs_sampled{m.job}, id());
}

}  // namespace calserve::actors
