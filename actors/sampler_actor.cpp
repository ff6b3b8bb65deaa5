#include "actors/sampler_actor.hpp"

#include "actors/chip_session_actor.hpp"
#include "actors/metrics.hpp"

namespace calserve::actors {

sampler_actor::sampler_actor(runtime& rt, metrics::calserve_metrics* metrics)
    : actor(rt, "sampler"), metrics_(metrics) {}

void sampler_actor::on_message(sampler_message& msg) {
    std::visit([this](auto& m) { on(m); }, msg);
}

void sampler_actor::on(sm_sample& m) {
    auto& seq = *m.job->seq;
    auto start = rt().now();
    std::span<const std::int32_t> all(seq.tokens);
    model::token_history history{all.first(std::size_t(seq.prompt_len)), all.subspan(std::size_t(seq.prompt_len))};
    auto picked = sampler_.sample(std::span<const model::bf16>(m.job->logits), seq.params, history, seq.rng);
    result<std::vector<token_logprob>> outcome = make_error(status::internal, "unset");
    if (!picked) {
        outcome = picked.error();
    } else {
        std::vector<token_logprob> picks;
        picks.reserve(1 + picked->top_count);
        picks.push_back({picked->token, picked->logprob});
        for (const auto& t : picked->top_logprobs()) picks.push_back({t.token, t.logprob});
        seq.tokens.push_back(picked->token);
        outcome = std::move(picks);
    }
    m.job->t_sampled = rt().now();
    if (metrics_) {
        metrics_->phase_seconds(metrics::phase::sample).observe(std::chrono::duration<double>(m.job->t_sampled - start).count());
    }
    (void)session_.tell(cs_sampled{m.job, std::move(outcome)}, id());
}

}  // namespace calserve::actors
