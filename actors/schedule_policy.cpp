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

const seq_view* least_recent_decode(std::span<const seq_view> seqs) {
    const seq_view* best = nullptr;
    for (const auto& s : seqs) {
        if (!s.ready || s.needs_prefill) continue;
        if (!best || s.last_served < best->last_served || (s.last_served == best->last_served && s.seq < best->seq))
            best = &s;
    }
    return best;
}
}  // namespace

std::optional<job_choice> plan_next_job(std::span<const seq_view> seqs, const tick_state& state,
                                        const schedule_params& params, nanoseconds now) {
    const seq_view* prefill = oldest_prefill(seqs);
    const seq_view* decode = least_recent_decode(seqs);
    if (!prefill && !decode) return std::nullopt;
    if (!decode) return job_choice{prefill->seq, true};
    if (!prefill) return job_choice{decode->seq, false};

    bool aged = now - prefill->arrived >= params.ageing;
    int decoders = int(std::count_if(seqs.begin(), seqs.end(), [](const seq_view& s) { return !s.needs_prefill; }));
    bool round_done = state.decodes_since_prefill >= std::max(1, decoders);
    bool budget_left = state.prefills_in_a_row < params.prefill_budget;
    if (budget_left && (aged || round_done)) return job_choice{prefill->seq, true};
    return job_choice{decode->seq, false};
}

tick_state after_job(tick_state state, const job_choice& choice) {
    if (choice.prefill) {
        ++state.prefills_in_a_row;
        state.decodes_since_prefill = 0;
    } else {
        state.prefills_in_a_row = 0;
        ++state.decodes_since_prefill;
    }
    return state;
}

admission_decision plan_admission(const admission_input& in) {
    if (!in.accepting) return {admission::reject, status::not_ready};
    if (!in.kv_could_ever_fit) return {admission::reject, status::context_overflow};
    if (in.running < in.max_running && in.kv_fits_now && in.queued == 0) return {admission::admit, status::ok};
    if (in.queued < in.max_queued) return {admission::queue, status::ok};
    return {admission::reject, status::queue_full};
}

}  // namespace calserve::actors
