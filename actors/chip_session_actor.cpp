#include "actors/chip_session_actor.hpp"

#include <algorithm>

#include "actors/batch_tick_actor.hpp"
#include "actors/device_actor.hpp"
#include "metrics/metrics.hpp"
#include "actors/request_actor.hpp"
#include "actors/sampler_actor.hpp"

namespace calserve::actors {

std::string_view to_string(slot_state s) {
    switch (s) {
        case slot_state::free: return "free";
        case slot_state::filling: return "filling";
        case slot_state::submitted: return "submitted";
        case slot_state::done: return "done";
        case slot_state::draining: return "draining";
    }
    return "?";
}

chip_session_actor::chip_session_actor(runtime& rt, request_lookup lookup, metrics::calserve_metrics* metrics)
    : actor(rt, "chip_session"), lookup_(std::move(lookup)), metrics_(metrics),
      slots_{slot_data{{k_slot_table, slot_state::free, "slot:ping"}, nullptr, {}, 0},
             slot_data{{k_slot_table, slot_state::free, "slot:pong"}, nullptr, {}, 0}} {}

void chip_session_actor::wire(address<batch_tick_actor> tick, address<device_actor> device,
                              address<sampler_actor> sampler) {
    tick_ = std::move(tick);
    device_ = std::move(device);
    sampler_ = std::move(sampler);
}

void chip_session_actor::on_message(chip_session_message& msg) {
    std::visit([this](auto& m) { on(m); }, msg);
    publish();
}

std::size_t chip_session_actor::busy_slots() const {
    std::size_t n = 0;
    for (const auto& s : slots_) n += s.life.is(slot_state::free) ? 0 : 1;
    return n;
}

void chip_session_actor::publish() {
    if (metrics_) metrics_->inflight_slots.set(double(busy_slots()));
    if (journal_)
        for (std::size_t i = 0; i < slots_.size(); ++i) journal_->set_slot(i, to_string(slots_[i].life.state()));
}

void chip_session_actor::record(const slot_data& s, const job_context& job, job_outcome outcome) {
    if (!journal_) return;
    journal_job j;
    j.slot = std::uint8_t(device::index_of(job.slot));
    j.prefill = job.prefill;
    j.rows = std::int64_t(job.rows.size());
    j.profile = job.t_fill.count() > 0 ? job.profile : 0;
    for (auto c : job.counts) j.tokens += c;
    j.start_ns = s.started_ns;
    j.device_done_ns = job.t_done.count();
    j.end_ns = rt().now().count();
    j.outcome = outcome;
    journal_->record_job(j);
}

void chip_session_actor::on(cs_run& m) {
    auto& s = slots_[device::index_of(m.slot)];
    if (!s.life.transition_to(slot_state::filling)) return;  // reported: the BatchTick broke the protocol
    auto job = std::make_shared<job_context>();
    job->slot = m.slot;
    job->epoch = ++s.epoch;
    job->rows = std::move(m.rows);
    job->prefill = m.prefill;
    job->generation = m.generation;
    job->drafts = std::move(m.drafts);
    job->logits = std::move(s.spare);
    if (m.chain) chain_to_other(*job);
    s.job = job;
    s.started_ns = rt().now().count();
    (void)device_.tell(da_execute{job, 0}, id());
}

// The other slot's decode job, if the device has not finished it yet, is this job's chain
// source: its rows that are rows here take their token from its draw. Once it is done
// its draws are already on the rows' sequences (on(cs_job_done)) and nothing chains.
void chip_session_actor::chain_to_other(job_context& job) {
    const auto& other = slots_[1 - device::index_of(job.slot)];
    if (!other.job || other.job->prefill) return;
    if (!other.life.is(slot_state::filling) && !other.life.is(slot_state::submitted)) return;
    job.chain_rows.assign(job.rows.size(), -1);
    for (std::size_t r = 0; r < job.rows.size(); ++r)
        for (std::size_t o = 0; o < other.job->rows.size(); ++o)
            if (other.job->rows[o] == job.rows[r]) job.chain_rows[r] = int(o);
    if (job.chained()) job.chain_from = other.job;
}

namespace {
// "decode job on slot pong, row 2 of 4 (chained)": a job as a failed request's warning names it.
std::string job_name(const job_context& job, std::size_t row) {
    std::string s = std::string(job.prefill ? "prefill" : "decode") + " job on slot " + std::string(device::to_string(job.slot));
    s += ", row " + std::to_string(row) + " of " + std::to_string(job.rows.size());
    if (row < job.chain_rows.size() && job.chain_rows[row] >= 0) s += " (chained)";
    return s;
}
}  // namespace

void apply_draws(job_context& job) {
    job.picks.assign(job.rows.size(), make_error(status::internal, "row not sampled"));
    for (std::size_t r = 0; r < job.rows.size() && r < job.drawn_tokens.size(); ++r) {
        if (!job.drawn(r)) continue;
        auto& seq = *job.rows[r];
        const bool verified = r < job.runs.size() && !job.runs[r].empty();
        if (verified)  // a verify row: its kept drafts, then the draw (cut where the request ends)
            seq.tokens.insert(seq.tokens.end(), job.runs[r].begin(), job.runs[r].end());
        else
            seq.tokens.push_back(job.drawn_tokens[r]);
        seq.rng.restore(job.drawn_rng[r]);
        job.picks[r] = std::vector<token_logprob>{{seq.tokens.back(), 0.0f}};
    }
}

void chip_session_actor::on(cs_submitted& m) {
    if (!current(m.job)) return;
    slot_of(m.job).life.transition_to(slot_state::submitted);
}

void chip_session_actor::on(cs_job_done& m) {
    if (!current(m.job)) return;
    auto& s = slot_of(m.job);
    if (!m.outcome) {
        auto code = m.outcome.error().code;
        if (code == status::not_ready) {
            // Refused because the device is recovering: the job is lost, not failed.
            record(s, *m.job, job_outcome::lost);
            s.job = nullptr;
            s.life.transition_to(slot_state::free);
            (void)tick_.tell(bt_job_lost{m.job->slot, m.job->row_ids(), false, m.job->generation}, id());
            return;
        }
        fail_rows(s, m.job, m.outcome.error());
        return;
    }
    if (m.job->unrun) {
        // Its chain source never reached the device: nothing ran; the rows go back as they were.
        record(s, *m.job, job_outcome::ok);
        s.job = nullptr;
        s.life.transition_to(slot_state::free);
        (void)tick_.tell(bt_slot_free{m.job->slot, m.job->row_ids(), m.job->row_ids(), {}, {}}, id());
        return;
    }
    s.life.transition_to(slot_state::done);
    if (m.job->partial) {
        // A prefill chunk: its KV is written, its logits are not the next token's. The row
        // goes back to the BatchTick unrun (no token, no answer to wait for).
        record(s, *m.job, job_outcome::ok);
        s.job = nullptr;
        s.life.transition_to(slot_state::free);
        (void)tick_.tell(bt_slot_free{m.job->slot, m.job->row_ids(), m.job->row_ids(), {}, {}}, id());
        return;
    }
    s.life.transition_to(slot_state::draining);
    m.job->t_wall_from = m.job->chained() ? std::max(m.job->t_fill, last_done_) : m.job->t_fill;
    last_done_ = std::max(last_done_, m.job->t_done);
    if (!m.job->prefill) apply_draws(*m.job);  // in completion order: a chained job's draw comes after this one
    const bool all_drawn = !m.job->prefill && !m.job->rows.empty() &&
                           m.job->rows_in(device::head_mode::sample) == m.job->rows.size();
    if (all_drawn && at_sampler_ == 0) {
        // Nothing for the Sampler, and no earlier job there whose tokens must reach the
        // Requests first: the step's critical path skips its two hops.
        m.job->t_sampled = rt().now();
        sampled(m.job);
        return;
    }
    ++at_sampler_;
    (void)sampler_.tell(sm_sample{m.job}, id());
}

void chip_session_actor::on(cs_sampled& m) {
    at_sampler_ = std::max(0, at_sampler_ - 1);
    if (!current(m.job)) return;
    sampled(m.job);
}

void chip_session_actor::sampled(const job_ptr& job) {
    auto& s = slot_of(job);
    // Read before the slot goes back: the next job owns the rows' sequences from then on.
    std::vector<address<request_actor>> requests(job->rows.size());
    std::vector<sequence_id> go_on;
    for (std::size_t r = 0; r < job->rows.size(); ++r) {
        requests[r] = lookup_(job->rows[r]->seq);  // invalid: finished meanwhile, its bt_finish is with the BatchTick
        if (requests[r].valid() && job->picks[r] && job->rows[r]->cannot_have_ended()) go_on.push_back(job->rows[r]->seq);
    }
    // Read while the job still holds its rows (the BatchTick may take them back below).
    std::vector<std::int64_t> cached(job->rows.size(), -1);
    std::vector<std::vector<prompt_score>> scores(job->rows.size());
    if (job->prefill)
        for (std::size_t r = 0; r < job->rows.size(); ++r) {
            cached[r] = job->rows[r]->cached_tokens;
            if (job->rows[r]->scoring()) scores[r] = job->rows[r]->prompt_scores;
        }
    s.spare = std::move(job->logits);  // consumed: the buffer may take the next job
    record(s, *job, job_outcome::ok);
    // The BatchTick first: the next step waits for it, the Requests' streaming does not.
    free_slot(s, true, std::move(go_on), verify_outcomes(*job));
    const double wall_s = std::chrono::duration<double>(job->t_done - job->t_wall_from).count();
    // A batched job's compute is shared evenly by its rows: summed over requests, each job counts once.
    const double device_s = job->device_compute_s / double(std::max<std::size_t>(1, job->rows.size()));
    for (std::size_t r = 0; r < job->rows.size(); ++r) {
        if (!requests[r].valid()) continue;
        const auto& outcome = job->picks[r];
        if (!outcome) {
            (void)requests[r].tell(rq_failed{outcome.error(), "sampling the " + job_name(*job, r)}, id());
            continue;
        }
        if (r < job->runs.size() && job->runs[r].size() > 1) {  // a verify row's run: one token event each
            for (std::size_t i = 0; i < job->runs[r].size(); ++i) {
                rq_token token{job->runs[r][i], 0.0f, {}};
                token.device_s = i == 0 ? device_s : 0.0;  // the job counts once per row
                token.device_wall_s = i == 0 ? wall_s : 0.0;
                (void)requests[r].tell(std::move(token), id());
            }
            continue;
        }
        const auto& picks = *outcome;
        rq_token token{picks[0].token, picks[0].logprob, {}};
        token.top.assign(picks.begin() + 1, picks.end());
        token.device_s = device_s;
        token.device_wall_s = wall_s;
        token.cached_tokens = cached[r];
        token.prompt_scores = std::move(scores[r]);
        (void)requests[r].tell(std::move(token), id());
    }
}

// A request- or model-level fault of the job. When one row's device call failed, only that row's
// request fails and the others are handed back unrun; otherwise every row's request fails.
void chip_session_actor::fail_rows(slot_data& s, const job_ptr& job, const error_info& e) {
    std::vector<sequence_id> unrun;
    for (std::size_t r = 0; r < job->rows.size(); ++r) {
        const auto seq = job->rows[r]->seq;
        if (job->failed_row >= 0 && std::size_t(job->failed_row) != r) {
            unrun.push_back(seq);
            continue;
        }
        if (auto request = lookup_(seq); request.valid()) (void)request.tell(rq_failed{e, job_name(*job, r)}, id());
    }
    record(s, *job, job_outcome::failed);
    s.job = nullptr;
    s.life.transition_to(slot_state::free);
    (void)tick_.tell(bt_slot_free{job->slot, job->row_ids(), std::move(unrun), {}, {}}, id());
}

void chip_session_actor::free_slot(slot_data& s, bool tell_tick, std::vector<sequence_id> go_on,
                                   std::vector<verify_outcome> verified) {
    auto job = std::move(s.job);
    s.life.transition_to(slot_state::free);
    if (tell_tick && job)
        (void)tick_.tell(bt_slot_free{job->slot, job->row_ids(), {}, std::move(go_on), std::move(verified)}, id());
}

std::vector<verify_outcome> verify_outcomes(const job_context& job) {
    std::vector<verify_outcome> out;
    for (std::size_t r = 0; r < job.rows.size() && r < job.runs.size(); ++r) {
        if (job.runs[r].empty() || !job.picks[r]) continue;
        out.push_back({job.rows[r]->seq, std::int64_t(job.drafted(r)), std::int64_t(job.accepted[r]),
                       std::int64_t(job.runs[r].size())});
    }
    return out;
}

void chip_session_actor::on(cs_device_down& m) {
    device_up_ = false;
    // The BatchTick hears of the reset first, so that the lost jobs' rows (ready again)
    // are not scheduled into a device that is resetting.
    (void)tick_.tell(bt_device_down{m.generation}, id());
    // Jobs the device had not finished are lost; done/draining ones carry checked logits and finish.
    for (auto& s : slots_) {
        if (!s.life.is(slot_state::filling) && !s.life.is(slot_state::submitted)) continue;
        record(s, *s.job, job_outcome::lost);
        auto job = std::move(s.job);
        s.life.transition_to(slot_state::free);
        (void)tick_.tell(bt_job_lost{job->slot, job->row_ids(), job == m.culprit, job->generation}, id());
    }
}

void chip_session_actor::on(cs_device_up& m) {
    device_up_ = true;
    (void)tick_.tell(bt_device_up{m.generation}, id());
}

void chip_session_actor::on(cs_device_dead&) {
    device_up_ = false;
    (void)tick_.tell(bt_device_dead{}, id());
}

}  // namespace calserve::actors
