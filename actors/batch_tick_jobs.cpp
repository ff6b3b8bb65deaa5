// BatchTick, its jobs: forming them (schedule, commit), their ends (bt_slot_free,
// bt_job_lost) and what the device then holds of each row (device_copy). The actor's
// role, phases and invariants are in actors/batch_tick_actor.hpp.
#include <algorithm>

#include "actors/batch_tick_actor.hpp"
#include "actors/chip_session_actor.hpp"
#include "actors/kv_manager_actor.hpp"
#include "actors/liveness_policy.hpp"
#include "actors/request_actor.hpp"
#include "config/invariant.hpp"
#include "device/sampling_head.hpp"
#include "metrics/metrics.hpp"
#include "model/sampling/params.hpp"

namespace calserve::actors {

void batch_tick_actor::on(bt_slot_free& m) {
    slot_free_[device::index_of(m.slot)] = true;
    job_ended(m.rows, job_end::completed, m.unrun);
    verified(m.verified);
    for (auto seq : m.unrun)
        if (auto it = entries_.find(seq); it != entries_.end()) stop_awaiting(it->second);
    for (auto seq : m.go_on) {
        auto it = entries_.find(seq);
        if (it == entries_.end() || !stop_awaiting(it->second)) continue;
        it->second.last_served = rt().now();
        ++it->second.answers_to_skip;
    }
    schedule();
}

void batch_tick_actor::on(bt_job_lost& m) {
    slot_free_[device::index_of(m.slot)] = true;
    job_ended(m.rows, m.culprit ? job_end::failed : job_end::lost);
    // A job formed before a reset and refused after the device came back: the slot and its
    // rows (to be prefilled again) are free now, and nothing else may come to schedule them.
    // A job of the current generation refused as not ready waits for bt_device_up instead
    // (scheduled again at once, it would be refused again until the warm-up ends).
    if (m.generation != device_generation_) schedule();
    else awaiting_device_up_ = true;  // only an observation: the liveness check waits for bt_device_up too
}

// A fault, a failed or lost job or a preemption: the device's copy of its KV is gone, and
// with it what a cache hit copied in and its running cache entry.
void batch_tick_actor::drop_copy(entry& e) {
    switch (e.copy()) {
        case device_copy::copied: e.device.transition_to(device_copy::none); break;
        case device_copy::held:
        case device_copy::shared:
        case device_copy::recopied: e.device.transition_to(device_copy::lost); break;
        case device_copy::none:
        case device_copy::lost: break;
    }
}

// A failed job counts against its rows' retry budget; a job lost only because it was in
// flight beside the failed one does not (its rows did nothing wrong).
void batch_tick_actor::job_ended(const std::vector<sequence_id>& rows, job_end how,
                                 const std::vector<sequence_id>& unrun) {
    for (auto seq : rows) {
        auto it = entries_.find(seq);
        if (it == entries_.end()) continue;
        entry& e = it->second;
        const bool ran = std::find(unrun.begin(), unrun.end(), seq) == unrun.end();
        if (!ran || how != job_end::completed) --e.tokens_after;  // no draw came of it
        if (in_two_jobs(e.phase()))
            one_of_two_ended(e, how, ran);
        else
            last_job_ended(seq, e, how);
    }
}

// The chained step behind it, or the job it was chained to, still holds it. A token it
// drew goes to the Request, whose answer is not waited for (the next step is under way).
// A chained step back unrun leaves its source job holding it, which may not chain again.
void batch_tick_actor::one_of_two_ended(entry& e, job_end how, bool ran) {
    if (how != job_end::completed) drop_copy(e);
    if (how == job_end::completed && ran) {
        e.seq->failed_jobs = 0;
        ++e.answers_to_skip;
    }
    if (e.phase() == seq_phase::finishing_chained)
        e.life.transition_to(seq_phase::finishing_job);
    else
        e.life.transition_to(ran ? seq_phase::decode : seq_phase::decode_unchained);
}

void batch_tick_actor::last_job_ended(sequence_id seq, entry& e, job_end how) {
    const bool finishing = e.phase() == seq_phase::finishing_job;
    if (how == job_end::completed) {
        e.seq->failed_jobs = 0;
        if (!finishing) {
            e.life.transition_to(seq_phase::awaiting);
            share_prompt(e);
        }
    } else {
        drop_copy(e);  // its KV is rebuilt: shared again once it is whole
        if (!finishing) e.life.transition_to(seq_phase::ready);
        if (how == job_end::failed && ++e.seq->failed_jobs > options_.max_job_retries && !finishing) {
            give_up(seq, e);
            return;
        }
    }
    if (finishing) release(seq);
}

// Once its whole prompt is on the device, the prompt's KV is indexed as a running prefix
// cache entry, so requests arriving while it runs (the other choices of an n > 1
// request, a shared system prompt) copy it instead of prefilling it.
void batch_tick_actor::share_prompt(entry& e) {
    const auto& s = *e.seq;
    if (!options_.prefix_cache || e.copy() != device_copy::held || s.device_len < s.prompt_len) return;
    e.device.transition_to(device_copy::shared);
    auto prompt = e.looked_up && std::int64_t(e.looked_up->size()) == s.prompt_len
                      ? std::move(e.looked_up)
                      : std::make_shared<const std::vector<token_id>>(s.tokens.begin(), s.tokens.begin() + s.prompt_len);
    e.looked_up.reset();
    (void)kv_.tell(kv_share{s.seq, std::move(prompt), s.scope}, id());
}

std::optional<device::slot> batch_tick_actor::free_slot() const {
    for (auto s : {device::slot::ping, device::slot::pong})
        if (slot_free_[device::index_of(s)]) return s;
    return std::nullopt;
}

// on_demand: a ready sequence whose next job would pass its reservation grows first.
// Only idle sequences are read: a job's holders write tokens and device_len meanwhile.
void batch_tick_actor::grow_where_needed() {
    for (auto& [sid, e] : entries_)
        if (e.phase() == seq_phase::ready && kv_needs_grow(std::int64_t(e.seq->tokens.size()), e.seq->kv_tokens))
            grow_kv(e, 0);
}

std::vector<seq_view> batch_tick_actor::views() const {
    std::vector<seq_view> out;
    out.reserve(entries_.size());
    for (const auto& [sid, e] : entries_) {
        const auto p = e.phase();
        if (!holds_kv(p) || ending(p)) continue;
        // A job's holders own the tokens of a sequence in one: only an idle one's are read.
        const bool in_job = holds_job(p);
        const bool prefill = needs_prefill({in_job, p == seq_phase::prefill, device_holds(e.copy()),
                                            in_job ? 0 : e.seq->pending_tokens()});
        out.push_back({sid, prefill, p == seq_phase::ready, e.seq->arrived, e.last_served, e.group,
                       p == seq_phase::awaiting, in_job, p == seq_phase::prefill, chainable(e)});
    }
    return out;
}

// What `chainable` reads of a row (fields of the sequence read here never change after
// admission; its tokens belong to its job meanwhile, so `tokens_after` counts them).
// A row the drafting policy would have draft on its next step is not chained: its drafts
// come from its tokens, which the host must have read first.
bool batch_tick_actor::chainable(const entry& e) const {
    const auto& s = *e.seq;
    return actors::chainable({options_.chain_tokens, e.phase() == seq_phase::decode, device_holds(e.copy()),
                              !s.constraint && model::head_can_sample(s.params), e.tokens_after, s.kv_tokens,
                              s.prompt_len, s.max_tokens}) &&
           !would_draft(e);
}

// The policy's answer for a row's next step (its tokens once its job has drawn: tokens_after),
// in a step of every running row.
bool batch_tick_actor::would_draft(const entry& e) const {
    if (!e.drafter) return false;
    const auto& s = *e.seq;
    std::int64_t running = 0;
    for (const auto& [sid, other] : entries_) running += holds_kv(other.phase()) && !ending(other.phase()) ? 1 : 0;
    const model::speculative::step_facts facts{running, false, position_cost(running, e.tokens_after - 1),
                                               std::min(s.max_tokens - (e.tokens_after - s.prompt_len),
                                                        s.kv_tokens - e.tokens_after + 1)};
    return model::speculative::draft_length(options_.speculative.policy, e.acceptance, facts) > 0;
}

void batch_tick_actor::commit(const job_choice& choice, device::slot slot) {
    const int group = int(device::index_of(slot));
    std::vector<sequence_ptr> rows;
    rows.reserve(choice.rows.size());
    std::vector<std::vector<token_id>> drafts;  // per row (empty: a plain step); none when no row drafts
    bool chain = false;
    for (auto sid : choice.rows) {
        entry& e = entries_.at(sid);
        if (!choice.prefill && e.phase() == seq_phase::decode) {
            // Chained: its input token is the draw of the job it is in (plan_next_job only
            // offers such a row when chainable()).
            CALSERVE_INVARIANT(chainable(e), "a row in a job joined another without chaining");
            e.life.transition_to(seq_phase::decode_chained);
            ++e.tokens_after;
            if (e.drafter) model::speculative::observe(options_.speculative.policy, e.acceptance, 0, 0);  // a plain step
            e.group = group;
            chain = true;
            rows.push_back(e.seq);
            drafts.emplace_back();
            continue;
        }
        const auto copy = e.copy();
        if (!device_holds(copy)) {
            // Nothing of it on the device (any more): feed everything, or all after a prefix cache hit.
            e.seq->device_len = copied_in(copy) ? e.seq->cached_tokens : 0;
            if (metrics_ && (copy == device_copy::lost || copy == device_copy::recopied))
                metrics_->requests_recovered.inc();  // after a reset or preemption
            e.device.transition_to(device_copy::held);
        }
        CALSERVE_INVARIANT(std::int64_t(e.seq->tokens.size()) <= e.seq->kv_tokens, "job past the KV reservation");
        auto run = choice.prefill ? std::vector<token_id>{} : draft_for(e, std::int64_t(choice.rows.size()));
        e.life.transition_to(choice.prefill ? seq_phase::prefill : run.empty() ? seq_phase::decode : seq_phase::verify);
        drafts.push_back(std::move(run));
        e.tokens_after = std::int64_t(e.seq->tokens.size()) + 1;
        e.seq->prefill_alone = choice.prefill && entries_.size() == 1;  // schedule_policy: prefill_chunk_limit
        if (!choice.prefill) e.group = group;
        if (copy == device_copy::none || copy == device_copy::copied) (void)e.request.tell(rq_scheduled{}, id());
        rows.push_back(e.seq);
    }
    if (!choice.prefill) {
        // Members of this slot's group left out (the group grew past its cap) go to whichever slot frees next.
        for (auto& [sid, e] : entries_)
            if (e.group == group && !holds_job(e.phase())) e.group = k_no_group;
    }
    tick_ = after_job(tick_, choice);
    wake_at_window_end(std::nullopt);  // a job formed: the admission window is closed
    slot_free_[device::index_of(slot)] = false;
    if (std::all_of(drafts.begin(), drafts.end(), [](const auto& d) { return d.empty(); })) drafts.clear();
    (void)session_.tell(cs_run{slot, std::move(rows), choice.prefill, chain, device_generation_, std::move(drafts)}, id());
}

double batch_tick_actor::position_cost(std::int64_t rows, std::int64_t past) const {
    return options_.position_cost ? options_.position_cost(rows, past) : model::speculative::k_fixed_position_cost;
}

// The tokens a decode row drafts this step (empty: a plain step): the policy decides from
// the step's live rows and the row's recent acceptance; drafts never take the sequence
// past max_tokens or past its KV reservation (kv_tokens). Its tokens are read here only
// while no job holds it.
std::vector<token_id> batch_tick_actor::draft_for(entry& e, std::int64_t live_rows) {
    if (!e.drafter) return {};
    namespace spec = model::speculative;
    const auto& s = *e.seq;
    const auto& policy = options_.speculative.policy;
    const std::int64_t room = s.kv_tokens - std::int64_t(s.tokens.size());
    const spec::step_facts facts{live_rows, false, position_cost(live_rows, std::int64_t(s.tokens.size())),
                                 std::min(s.max_tokens - s.generated(), room + 1)};
    const auto k = std::min(spec::draft_length(policy, e.acceptance, facts), device::k_verify_drafts_max);
    auto drafts = k > 0 ? e.drafter->propose(s.tokens, k) : std::vector<token_id>{};
    if (drafts.empty()) spec::observe(policy, e.acceptance, 0, 0);  // a plain step
    return drafts;
}

// Its verify rows' outcomes: the policy learns the acceptance, and the Request's answers
// to all but the last token of each run are only counted.
void batch_tick_actor::verified(const std::vector<verify_outcome>& outcomes) {
    for (const auto& v : outcomes) {
        if (metrics_) {
            metrics_->spec_verify_rows.inc();
            metrics_->spec_drafted_tokens.inc(double(v.drafted));
            metrics_->spec_accepted_tokens.inc(double(v.accepted));
            const double drafted = metrics_->spec_drafted_tokens.value();
            metrics_->spec_acceptance_rate.set(drafted > 0 ? metrics_->spec_accepted_tokens.value() / drafted : 0.0);
        }
        auto it = entries_.find(v.seq);
        if (it == entries_.end()) continue;  // ended with its job
        entry& e = it->second;
        e.answers_to_skip += int(v.emitted) - 1;
        if (e.drafter) {
            model::speculative::observe(options_.speculative.policy, e.acceptance, v.drafted, v.accepted);
            e.drafter->on_kept(std::int64_t(e.seq->tokens.size()));
        }
    }
}

void batch_tick_actor::schedule() {
    while (device_up_) {
        auto slot = free_slot();
        if (!slot) return;
        const auto other = *slot == device::slot::ping ? device::slot::pong : device::slot::ping;
        const bool other_busy = options_.max_inflight >= 2 && !slot_free_[device::index_of(other)];
        grow_where_needed();
        auto seqs = views();
        const slot_view where{int(device::index_of(*slot)), other_busy};
        // One reading of the clock for both: on the threaded runtime it moves meanwhile, and a
        // window that closed between two readings held the step and armed no timer (a stall).
        const auto now = rt().now();
        auto choice = plan_next_job(seqs, tick_, options_.policy, now, where);
        if (!choice) return wake_at_window_end(window_holds_until(seqs, tick_, options_.policy, now, where));
        commit(*choice, *slot);
    }
}

// While the admission window holds a job, plan again when it closes; otherwise no timer
// (a job formed, or nothing is held), so none fires after the last sequence left.
void batch_tick_actor::wake_at_window_end(std::optional<nanoseconds> until) {
    if (until == window_wake_) return;
    window_timer_.cancel();
    window_wake_ = until;
    if (until) window_timer_ = start_timer(*until - rt().now(), [this] { (void)enqueue(bt_window_closed{}, id()); });
}

void batch_tick_actor::on(bt_window_closed&) {
    window_wake_.reset();
    schedule();
}

void batch_tick_actor::check_liveness() {
    idle_input in;
    in.device_up = device_up_ && !dead_;
    in.awaiting_device_up = awaiting_device_up_;
    for (int s = 0; s < options_.policy.slots; ++s) (slot_free_[std::size_t(s)] ? in.slot_free : in.job_in_flight) = true;
    in.window_timer = window_wake_.has_value();
    for (const auto& [sid, e] : entries_) {
        const auto p = e.phase();
        in.ready += p == seq_phase::ready ? 1 : 0;
        in.awaiting += p == seq_phase::awaiting || p == seq_phase::kv_wait_awaiting ? 1 : 0;
        in.kv_out += p == seq_phase::growing || p == seq_phase::finishing_grow ? 1 : 0;
    }
    if (!idle_is_stalled(in)) {
        stall_reported_ = false;
        return;
    }
    if (stall_reported_) return;
    stall_reported_ = true;
    ++stalls_;
    if (metrics_) metrics_->scheduler_stalls.inc();
    // An error log (report_failure), and a failure a test or a soak seed fails on; never a throw.
    rt().report_failure("batch_tick: liveness: idle with a runnable row, a free slot, a ready device and nothing to wake it (" +
                        describe_rows() + ")");
}

// The state a stall report names: slots, the admission window, every row.
std::string batch_tick_actor::describe_rows() const {
    std::string out = "slots free " + std::to_string(slot_free_[0]) + "/" + std::to_string(slot_free_[1]) +
                      ", window " + (tick_.left_at ? "open since " + std::to_string(tick_.left_at->count()) + "ns" : "closed") +
                      ", generation " + std::to_string(device_generation_) + ", pending " + std::to_string(pending_.size()) +
                      "; rows:";
    for (const auto& [sid, e] : entries_)
        out += " " + std::to_string(sid) + "=" + std::string(to_string(e.phase())) + "/" + std::string(to_string(e.copy())) +
               " group " + std::to_string(e.group) + " skip " + std::to_string(e.answers_to_skip) + " tokens " +
               std::to_string(e.tokens_after);
    return out;
}

}  // namespace calserve::actors
