#pragma once
//! ChipSession: one model session bound to a chip set (TP2 on {0,1}); owns the
//! ping and pong slots, each with its own JobContext and exclusive buffers. A
//! slot carries one job: a prefill (or a chunk of one), or a decode batch whose
//! rows all finish together (each row's token goes to its own Request).
//!
//! Slot lifecycle (per slot):
//!
//!   free --run--> filling --submitted--> submitted --job done--> done --> draining --sampled--> free
//!     ^              |                       |                       |
//!     +--- failed ---+-- failed, lost -------+                       |   (draining jobs finish)
//!     |                  at a device fault, or unrun                 |
//!     +---------------------- a prefill chunk (nothing to sample) ---+
//!
//! When a job completes, the sampling head's draws become its rows' tokens
//! (`apply_draws`, in completion order) and the Sampler draws the other rows; a
//! decode job the head drew whole skips the Sampler unless an earlier job is
//! still there (tokens reach the Requests in job order). Token chaining
//! (`cs_run::chain`): a decode job's rows may also be rows of the other slot's
//! decode job, still in flight; their input token is that job's draw, copied on
//! the device. If that job never reached the device, the chained job is handed
//! back unrun (the slot frees, no token). A job lost at a device fault
//! is re-run by the BatchTick from the rows' tokens. A verify row (speculative
//! decoding) emits a run of tokens: each goes to its Request as a token of its own,
//! in order, and the BatchTick hears what the row drafted, kept and emitted.
//!
//! At most `max_inflight` (1 or 2) slots are out of `free`. While the device
//! runs one slot the host samples the other (draining) and fills the next.
//! Invariant: a slot's logits are consumed (sampled) before the slot takes a
//! new job; the BatchTick only hands a slot back after `bt_slot_free`.
#include <array>

#include "actors/batch_tick_messages.hpp"
#include "actors/runtime/actor.hpp"
#include "actors/chip_session_messages.hpp"
#include "actors/engine_journal.hpp"
#include "actors/runtime/lifecycle.hpp"

namespace calserve::metrics {
struct calserve_metrics;
}

namespace calserve::actors {

class batch_tick_actor;
class device_actor;
class sampler_actor;
class request_actor;

enum class slot_state : std::uint8_t { free, filling, submitted, done, draining };
std::string_view to_string(slot_state s);

inline constexpr std::array<transition<slot_state>, 8> k_slot_table{{
    {slot_state::free, slot_state::filling},
    {slot_state::filling, slot_state::submitted},
    {slot_state::filling, slot_state::free},      // refused before infer
    {slot_state::submitted, slot_state::done},
    {slot_state::submitted, slot_state::free},    // failed or lost
    {slot_state::done, slot_state::draining},
    {slot_state::draining, slot_state::free},
    {slot_state::done, slot_state::free},
}};

// The sampling head's draws of a completed decode job become its rows' tokens and RNG
// states (and their picks); the Sampler then draws only the other rows. The ChipSession
// applies them in completion order, so a row also in the next (chained) job has this
// token before that job's draw is applied.
void apply_draws(job_context& job);
// What the job's verify rows did (drafted, kept, emitted), for the BatchTick's drafting policy.
std::vector<verify_outcome> verify_outcomes(const job_context& job);

// Resolves a sequence to its Request actor (owned by the engine's registry).
using request_lookup = std::function<address<request_actor>(sequence_id)>;

class chip_session_actor : public actor<chip_session_actor, chip_session_message> {
public:
    chip_session_actor(runtime& rt, request_lookup lookup, metrics::calserve_metrics* metrics);
    void wire(address<batch_tick_actor> tick, address<device_actor> device, address<sampler_actor> sampler);
    // Where finished jobs and slot states are recorded for the console (may stay null).
    void set_journal(std::shared_ptr<engine_journal> journal) { journal_ = std::move(journal); }

    void on_message(chip_session_message& msg);

    slot_state state_of(device::slot s) const { return slots_[device::index_of(s)].life.state(); }
    std::size_t busy_slots() const;

private:
    struct slot_data {
        lifecycle<slot_state, k_slot_table.size()> life;
        job_ptr job;                        // the job in this slot (a new JobContext per job)
        std::vector<std::byte> spare;      // the slot's logits buffer while free (reused, never shared)
        std::uint64_t epoch = 0;
        std::int64_t started_ns = 0;        // when the slot took its job (runtime clock)
    };
    void on(cs_run& m);
    void on(cs_submitted& m);
    void on(cs_job_done& m);
    void on(cs_sampled& m);
    void on(cs_device_down& m);
    void on(cs_device_up& m);
    void on(cs_device_dead& m);

    slot_data& slot_of(const job_ptr& job) { return slots_[device::index_of(job->slot)]; }
    bool current(const job_ptr& job) { return job && slot_of(job).job == job; }
    void free_slot(slot_data& s, bool tell_tick, std::vector<sequence_id> go_on = {},
                   std::vector<verify_outcome> verified = {});
    void chain_to_other(job_context& job);
    void sampled(const job_ptr& job);  // every row has its answer: free the slot, stream the tokens
    void fail_rows(slot_data& s, const job_ptr& job, const error_info& e);
    void publish();
    void record(const slot_data& s, const job_context& job, job_outcome outcome);

    request_lookup lookup_;
    metrics::calserve_metrics* metrics_;
    std::shared_ptr<engine_journal> journal_;
    address<batch_tick_actor> tick_;
    address<device_actor> device_;
    address<sampler_actor> sampler_;
    std::array<slot_data, device::k_slot_count> slots_;
    bool device_up_ = true;
    int at_sampler_ = 0;                     // sm_sample sent, cs_sampled not back yet
    std::chrono::nanoseconds last_done_{0};  // t_done of the latest job that completed (chained jobs' wall start)
};

}  // namespace calserve::actors
