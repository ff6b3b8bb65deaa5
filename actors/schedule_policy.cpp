#include "actors/schedule_policy.hpp"

#include <algorithm>

namespace calserve::actors {

namespace {
const seq_view* oldest_prefill(std::span<const seq_view> seqs) {
    const seq_view* best = nullptr;
    for (const auto& s : seqs) {
        if (!s.ready || !s.needs_prefill) continue;
        if (!best || s.arrived < best->arrived || (s.arrived == best->arrived && s.seq < best->seq)) best = &s;
    }
    return best;
}

int decoders_of(std::span<const seq_view> seqs) {
    return int(std::count_if(seqs.begin(), seqs.end(), [](const seq_view& s) { return !s.needs_prefill; }));
}

struct decode_plan {
    std::vector<std::uint64_t> rows;
    bool awaiting = false;  // a member of the batch-to-be still awaits its Request's answer
    bool held() const { return awaiting; }
};

// The decode batch for `where`: with two slots and two or more decoders, two groups (one
// per slot); a slot then takes its own group and unassigned rows while the other is busy.
bool two_groups(int decoders, const schedule_params& params) {
    return params.decode_groups >= 2 && params.slots >= 2 && decoders >= 2;
}

decode_plan plan_decode(std::span<const seq_view> seqs, const schedule_params& params, slot_view where) {
    const int decoders = decoders_of(seqs);
    const bool two = two_groups(decoders, params);
    decode_plan out;
    std::vector<const seq_view*> ready;
    for (const auto& s : seqs) {
        if (s.needs_prefill) continue;
        const bool eligible = !two || !where.other_busy || s.group == k_no_group || s.group == where.slot;
        if (!eligible) continue;
        if (s.chainable && !two) {  // its token comes from the job in flight, on the device
            ready.push_back(&s);
            continue;
        }
        if (s.awaiting && (!two || s.group != k_no_group)) out.awaiting = true;
        // One group: a decoder still in the other slot's decode job is one step from joining; one in
        // its prefill is not waited for (the batch would idle the device for the prefill's turnaround).
        if (!two && s.in_job && !s.in_prefill && decoders <= params.max_batch) out.awaiting = true;
        if (s.ready) ready.push_back(&s);
    }
    std::sort(ready.begin(), ready.end(), [](const seq_view* a, const seq_view* b) {
        return a->last_served != b->last_served ? a->last_served < b->last_served : a->seq < b->seq;
    });
    const auto take = std::min<std::size_t>(ready.size(), std::size_t(group_cap(decoders, params)));
    for (std::size_t i = 0; i < take; ++i) out.rows.push_back(ready[i]->seq);
    std::sort(out.rows.begin(), out.rows.end());
    return out;
}
}  // namespace

int group_cap(int decoders, const schedule_params& params) {
    if (!two_groups(decoders, params)) return std::max(1, std::min(params.max_batch, decoders));
    return std::max(1, std::min(params.max_batch, (decoders + 1) / 2));
}

std::optional<job_choice> plan_next_job(std::span<const seq_view> seqs, const tick_state& state,
                                        const schedule_params& params, nanoseconds now, slot_view where) {
    const seq_view* prefill = oldest_prefill(seqs);
    auto decode = plan_decode(seqs, params, where);
    const bool decode_waits = decode.rows.empty() || decode.held();
    if (!prefill) {
        if (decode_waits || admit_window_until(state, params, now)) return std::nullopt;
        return job_choice{false, std::move(decode.rows)};
    }
    // A decode is due when rows are ready or their answers are one message away.
    const bool decode_due = !decode.rows.empty() || decode.awaiting;
    if (!decode_due) return job_choice{true, {prefill->seq}};

    const bool aged = now - prefill->arrived >= params.ageing;
    const int decoders = decoders_of(seqs);
    // Decode jobs that advance every decoder once: two groups, or one batch (several
    // when the decoders outnumber max_batch).
    const int groups = two_groups(decoders, params)
                           ? 2
                           : std::max(1, (decoders + std::max(1, params.max_batch) - 1) / std::max(1, params.max_batch));
    const bool round_done = state.decodes_since_prefill >= groups;
    const bool budget_left = state.prefills_in_a_row < params.prefill_budget;
    if (budget_left && (aged || round_done)) return job_choice{true, {prefill->seq}};
    if (decode_waits) return std::nullopt;  // the step boundary is one message away
    return job_choice{false, std::move(decode.rows)};
}

std::optional<nanoseconds> admit_window_until(const tick_state& state, const schedule_params& params, nanoseconds now) {
    if (params.admit_window <= nanoseconds{0} || !state.left_at) return std::nullopt;
    const auto until = *state.left_at + params.admit_window;
    if (now >= until) return std::nullopt;
    return until;
}

std::optional<nanoseconds> window_holds_until(std::span<const seq_view> seqs, const tick_state& state,
                                              const schedule_params& params, nanoseconds now, slot_view where) {
    const auto until = admit_window_until(state, params, now);
    if (!until) return std::nullopt;
    auto closed = state;
    closed.left_at.reset();
    if (!plan_next_job(seqs, closed, params, now, where)) return std::nullopt;
    return until;
}

tick_state after_job(tick_state state, const job_choice& choice) {
    state.left_at.reset();
    if (choice.prefill) {
        ++state.prefills_in_a_row;
        state.decodes_since_prefill = 0;
    } else {
        state.prefills_in_a_row = 0;
        ++state.decodes_since_prefill;
    }
    return state;
}

std::optional<std::size_t> pick_profile(std::span<const std::int64_t> profiles, std::int64_t rows) {
    for (std::size_t i = 0; i < profiles.size(); ++i)
        if (profiles[i] >= rows) return i;
    return std::nullopt;
}

admission_decision plan_door(const door_input& in) {
    if (in.device_dead) return {admission::reject, status::device_dead};
    if (!in.accepting) return {admission::reject, status::not_ready};
    if (!in.fits_context) return {admission::reject, status::context_overflow};
    if (in.in_flight >= in.max_in_flight) return {admission::reject, status::queue_full};
    return {admission::admit, status::ok};
}

admission_decision plan_start(const start_input& in) {
    if (in.device_dead) return {admission::reject, status::device_dead};
    if (in.running < in.max_running && in.ahead == 0) return {admission::admit, status::ok};
    return {admission::queue, status::ok};
}

bool fits_context(std::int64_t prompt, std::int64_t max_tokens, std::int64_t context) {
    return prompt + max_tokens <= context;
}

bool chainable(const chain_input& in) {
    if (!in.enabled || !in.in_one_decode_job || !in.device_holds_kv || !in.device_draws) return false;
    return in.tokens_after <= in.kv_tokens && in.tokens_after - in.prompt_len < in.max_tokens;
}

bool needs_prefill(const prefill_input& in) {
    if (in.in_job) return in.job_is_prefill;
    return !in.device_holds_kv || in.pending_tokens > 1;
}

namespace {
std::int64_t round_to_blocks(const kv_sizing& kv, std::int64_t tokens, std::int64_t full_tokens) {
    const std::int64_t block = std::max<std::int64_t>(1, kv.block_tokens);
    return std::min(full_tokens, (tokens + block - 1) / block * block);
}
}  // namespace

std::int64_t kv_reserve_tokens(const kv_sizing& kv, std::int64_t tokens, std::int64_t full_tokens) {
    std::int64_t want = full_tokens;
    if (kv.policy == kv_policy::on_demand) want = std::min(full_tokens, tokens + kv.step_tokens);
    return round_to_blocks(kv, want, full_tokens);
}

std::int64_t kv_grow_tokens(const kv_sizing& kv, std::int64_t tokens, std::int64_t full_tokens) {
    return round_to_blocks(kv, tokens + kv.step_tokens, full_tokens);
}

bool kv_needs_grow(std::int64_t tokens, std::int64_t kv_tokens) { return tokens > kv_tokens; }

std::int64_t prefill_chunk_limit(const chunk_budget& budget, bool others_active, std::int64_t pending,
                                 const std::function<nanoseconds(std::int64_t)>& price) {
    if (!others_active || budget.tokens <= 0) return 0;
    if (budget.target <= nanoseconds{0}) return budget.tokens;
    if (pending <= k_prefill_chunk_min) return 0;
    if (price(k_prefill_chunk_min) <= nanoseconds{0}) return budget.tokens;  // the device cannot price it
    if (price(pending) <= budget.target) return 0;                           // the rest fits: one job
    std::int64_t lo = k_prefill_chunk_min, hi = pending;  // price(lo) fits or lo is the floor; price(hi) does not
    while (hi - lo > 1) {
        const auto mid = lo + (hi - lo) / 2;
        (price(mid) <= budget.target ? lo : hi) = mid;
    }
    return lo;
}

bool preemptible(const victim_view& v) { return v.holds_kv && !v.in_job && !v.kv_request_out && !v.ending; }

std::optional<std::uint64_t> plan_victim(std::span<const victim_view> sequences) {
    const victim_view* best = nullptr;
    for (const auto& c : sequences)
        if (preemptible(c) && (!best || c.admitted > best->admitted)) best = &c;
    if (!best) return std::nullopt;
    return best->seq;
}

}  // namespace calserve::actors
