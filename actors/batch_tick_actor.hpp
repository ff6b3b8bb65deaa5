#pragma once
//! BatchTick: the session's scheduler. Forms the next job whenever a slot frees.
//!
//! Owns the table of admitted sequences and which slots are free. Policy is
//! `plan_next_job` (actors/schedule_policy.hpp): one prefill, or a decode batch
//! of up to `max_batch` rows (continuous batching: sequences join after their
//! prefill and leave when they finish, are cancelled or time out, at any step
//! boundary); this actor only applies it. With two slots the decoding sequences
//! form two groups that alternate on ping and pong.
//!
//! Admission, KV sizing and preemption are the pure functions of
//! actors/schedule_policy.hpp too (`plan_start`, `kv_reserve_tokens`,
//! `kv_grow_tokens`, `plan_victim`). KV (runtime.kv_policy): `reserve` holds
//! prompt + max_tokens from admission; `on_demand` holds the prompt plus
//! `kv_step_tokens` and grows before a job would pass the reservation
//! (kv_grow). A grow that finds no free block preempts by recompute: the most
//! recently admitted sequence holding KV that is in no job, has no grow out and
//! is not ending (maybe the grower itself) gives its KV back and re-queues,
//! ahead of new admissions, to re-prefill prompt + the tokens generated so far.
//! The client sees a pause, never an error or a duplicated token.
//!
//! Sequence lifecycle (per admitted sequence, `seq_phase`, table below):
//!
//!                  granted                   run
//!   bt_admit --> kv_wait ----------> ready ----------------------> prefill, decode
//!                 ^   ^  preempted   | | | ^                           |        |
//!                 |   +--------------+ | | +--- job failed or lost ---+        | job done
//!                 |          kv_grow   | |                                     v
//!                 |   growing <--------+ +---- continue, go_on, unrun ---- awaiting
//!                 |      |                 ^                                |   ^
//!                 |      +--- grown, ------+                      preempted |   | granted
//!                 |           refused                                       v   |
//!                 +------------------- continue -------------------- kv_wait_awaiting
//!
//!   speculative decoding: ready --run with drafts--> verify, which ends as decode does
//!                    (awaiting, ready; finishing_job at bt_finish); never chained.
//!   token chaining:  decode --chain--> decode_chained --the first job ends--> decode
//!                                            |
//!                                            +--the chained step unrun--> decode_unchained
//!                    decode_unchained behaves as decode, except that it may not chain.
//!   bt_finish:  prefill, decode, decode_unchained, verify --> finishing_job --job ends--> released
//!               decode_chained --> finishing_chained --a job ends--> finishing_job
//!               growing         --> finishing_grow --grow answer--> released
//!               kv_wait, kv_wait_awaiting, ready, awaiting --------> released
//!   refused grant (kv_wait, kv_wait_awaiting) and retries exhausted (ready,
//!   after the failed job) --> released.
//!
//! `awaiting`: its token went to the Request, which answers continue or finish.
//! A row whose token cannot have ended it (bt_slot_free::go_on) leaves
//! `awaiting` at once: the batch need not wait for its Request, whose answer for
//! that token is then only counted (`answers_to_skip`). `unrun` rows (another
//! row's fault refused the job) get no token and are `ready` again.
//!
//! Beside the phase, the device's copy of its KV (`device_copy`, table below):
//!
//!          cache hit            run          whole prompt on the device
//!   none -----------> copied -------> held -----------------------------> shared
//!    |  ^                |             ^ |                                   |
//!    |  +--fault,--------+             | +--fault, failed or lost job,-------+
//!    |     preemption                 run        preemption        |
//!    +------------- run --------------+  |                         v
//!                                        +---- lost, recopied <-- lost
//!                                 lost --cache hit--> recopied --fault, preemption--> lost
//!
//! A job over a sequence whose copy is not held (`held`, `shared`) is a prefill of
//! prompt + generated tokens, from position 0, or after the tokens a cache hit copied
//! in (`copied`, `recopied`: the KvManager sent da_kv_copy before granting;
//! seq->cached_tokens). A held sequence whose device holds less than all but its last
//! token (a chunk of a long prompt prefilled, `runtime.prefill_chunk`) also gets a
//! prefill job, of the next chunk (`needs_prefill`). `shared`: its prompt is indexed as
//! a running prefix cache entry (kv_share).
//!
//! KV: the BatchTick asks the KvManager for KV (kv_reserve, kv_grow) and gives it back
//! (kv_release, or kv_grow's `preempt` for a victim); the KvManager alone tells the
//! device to free, keep or copy it. A released sequence whose copy is held goes with
//! the tokens its device KV holds, for the KvManager to keep as a cache entry.
//!
//! Token chaining (options.chain_tokens): a row in a decode job whose token the device
//! draws may join the next decode job while that one is in flight (`chainable`,
//! actors/schedule_policy.hpp); it is `decode_chained` until one of its two jobs ends,
//! and the answers to the tokens it went on past are only counted. A Request that ends
//! meanwhile costs at most that one step, whose token it never streams.
//!
//! Speculative decoding (options.speculative, docs/speculative.md): each sequence that
//! may draft (its tokens drawn by the device's head) has its drafter and its recent
//! acceptance here, in its entry (the BatchTick alone owns them); at each decode step
//! the pure policy (`draft_length`) decides from the step's live rows, that acceptance
//! and the device's price of a position (options.position_cost) whether it drafts, and a row with drafts enters the job as `verify`. Its
//! job's answer (bt_slot_free::verified) says how many drafts the device kept and how
//! many tokens it emitted: the Request answers each token, so all but the last answer
//! are only counted (`answers_to_skip`). Drafts never pass the KV reservation. A row the
//! policy would have draft on its next step is not chained (`would_draft`): its drafts
//! are looked up in its tokens, which the host must have read first.
//!
//! Plain data beside the phases (none decides what may happen next on its own): the
//! admission order (preemption picks the largest), the decode group (`group`, the slot
//! it last decoded in: a scheduling preference), `last_served`, `answers_to_skip` (a
//! count of answers still to arrive, one per token it went on past), `tokens_after` (its
//! token count once every job holding it has drawn: an input of `chainable`) and
//! `looked_up` (the vector its KV reservation looked up, reused by its kv_share).
//!
//! Invariants: a sequence is in at most one job, or two in `decode_chained` and
//! `finishing_chained`; KV is released exactly once, and never while a job holds the
//! sequence (no job phase -> released in the table but finishing_job, entered before
//! and left after its job ends); a slot carries one job at a time; a job never feeds a
//! sequence past its reservation (tokens <= kv_tokens). Liveness, checked after every
//! message (actors/liveness_policy.hpp): idle with a `ready` row, a free slot and a ready
//! device, something that plans again is still to come (a job's end, a Request's answer,
//! a KV answer, bt_device_up, the admission window's timer); otherwise the stall is
//! reported (error log, calserve_scheduler_stalls_total, a runtime failure).
#include <array>
#include <deque>
#include <functional>
#include <map>

#include "actors/runtime/actor.hpp"
#include "actors/batch_tick_messages.hpp"
#include "actors/runtime/lifecycle.hpp"
#include "actors/schedule_policy.hpp"
#include "model/speculative/options.hpp"

namespace calserve::metrics {
struct calserve_metrics;
}

namespace calserve::actors {

class chip_session_actor;
class kv_manager_actor;
class request_actor;

enum class seq_phase : std::uint8_t {
    kv_wait,            // admitted: its kv_reserve is out
    kv_wait_awaiting,   // preempted while its Request had a token to answer: kv_reserve out, answer pending
    ready,              // holds KV, idle: the next job may take it (after a kv_grow if it needs room)
    growing,            // holds KV, a kv_grow is out
    prefill,            // its prefill job is in flight
    decode,             // one decode job holding it is in flight
    decode_chained,     // two: a decode job and the chained step behind it (its token drawn on the device)
    decode_unchained,   // one decode job; a step chained behind it came back unrun: no chaining until it ends
    verify,             // one decode job in which it carries drafted tokens (speculative decoding)
    awaiting,           // holds KV; its token is with the Request, which answers continue or finish
    finishing_job,      // the Request ended while a job held it: released when the job ends
    finishing_chained,  // the Request ended while two chained jobs held it
    finishing_grow,     // the Request ended while a kv_grow was out: released at the answer
    released,           // KV given back, the entry dropped
};
std::string_view to_string(seq_phase p);

inline constexpr std::array<transition<seq_phase>, 35> k_seq_table{{
    {seq_phase::kv_wait, seq_phase::ready},                  // granted
    {seq_phase::kv_wait, seq_phase::released},               // finished, or the grant refused
    {seq_phase::kv_wait_awaiting, seq_phase::awaiting},      // granted
    {seq_phase::kv_wait_awaiting, seq_phase::kv_wait},       // continue
    {seq_phase::kv_wait_awaiting, seq_phase::released},      // finished, or the grant refused
    {seq_phase::ready, seq_phase::growing},                  // kv_grow
    {seq_phase::ready, seq_phase::prefill},                  // run
    {seq_phase::ready, seq_phase::decode},                   // run
    {seq_phase::ready, seq_phase::verify},                   // run, with drafts
    {seq_phase::ready, seq_phase::kv_wait},                  // preempted
    {seq_phase::ready, seq_phase::released},                 // finished, or retries exhausted
    {seq_phase::growing, seq_phase::ready},                  // grown, or refused
    {seq_phase::growing, seq_phase::finishing_grow},         // finished
    {seq_phase::finishing_grow, seq_phase::released},        // the grow answered
    {seq_phase::prefill, seq_phase::awaiting},               // job done: token sampled
    {seq_phase::decode, seq_phase::awaiting},
    {seq_phase::decode_unchained, seq_phase::awaiting},
    {seq_phase::verify, seq_phase::awaiting},                // job done: its run of tokens drawn
    {seq_phase::prefill, seq_phase::ready},                  // job failed or lost
    {seq_phase::decode, seq_phase::ready},
    {seq_phase::decode_unchained, seq_phase::ready},
    {seq_phase::verify, seq_phase::ready},
    {seq_phase::decode, seq_phase::decode_chained},          // chained: the next step joins a job
    {seq_phase::decode_chained, seq_phase::decode},          // one job ended (drew, failed or was lost)
    {seq_phase::decode_chained, seq_phase::decode_unchained},  // the chained step came back unrun
    {seq_phase::prefill, seq_phase::finishing_job},          // finished
    {seq_phase::decode, seq_phase::finishing_job},
    {seq_phase::decode_unchained, seq_phase::finishing_job},
    {seq_phase::verify, seq_phase::finishing_job},
    {seq_phase::decode_chained, seq_phase::finishing_chained},
    {seq_phase::finishing_chained, seq_phase::finishing_job},  // one of its two jobs ended
    {seq_phase::finishing_job, seq_phase::released},         // the job ended
    {seq_phase::awaiting, seq_phase::ready},                 // continue, go_on, unrun
    {seq_phase::awaiting, seq_phase::kv_wait_awaiting},      // preempted
    {seq_phase::awaiting, seq_phase::released},              // finished
}};
// A job holds it (the job's holders own the sequence's tokens meanwhile).
constexpr bool holds_job(seq_phase p) {
    return p == seq_phase::prefill || p == seq_phase::decode || p == seq_phase::decode_chained ||
           p == seq_phase::decode_unchained || p == seq_phase::verify || p == seq_phase::finishing_job ||
           p == seq_phase::finishing_chained;
}
// Two jobs hold it (a decode job and the step chained behind it).
constexpr bool in_two_jobs(seq_phase p) { return p == seq_phase::decode_chained || p == seq_phase::finishing_chained; }
// Its Request ended: it is released once nothing holds it.
constexpr bool ending(seq_phase p) {
    return p == seq_phase::finishing_job || p == seq_phase::finishing_chained || p == seq_phase::finishing_grow;
}
// KV granted to it (the KvManager holds blocks for it).
constexpr bool holds_kv(seq_phase p) {
    return p != seq_phase::kv_wait && p != seq_phase::kv_wait_awaiting && p != seq_phase::released;
}

// KV is never released while a job holds the sequence, but from finishing_job, which
// the actor leaves only once that job ended.
static_assert([] {
    for (auto t : k_seq_table)
        if (t.to == seq_phase::released && holds_job(t.from) && t.from != seq_phase::finishing_job) return false;
    return true;
}());

// The device's copy of a sequence's KV (diagram above): a job over a copy that is not
// held (held, shared) is a prefill.
enum class device_copy : std::uint8_t {
    none,      // no job ran it yet
    copied,    // no job ran it yet; a cache hit copied its first seq->cached_tokens in
    held,      // a job ran it; the device keeps its KV
    shared,    // held, and its prompt is indexed as a running prefix cache entry (kv_share)
    lost,      // a device fault, a lost or failed job or a preemption dropped it: re-prefill
    recopied,  // lost, then a cache hit copied its first seq->cached_tokens in again
};
std::string_view to_string(device_copy c);

inline constexpr std::array<transition<device_copy>, 11> k_copy_table{{
    {device_copy::none, device_copy::copied},      // granted with a cache hit
    {device_copy::none, device_copy::held},        // its first job
    {device_copy::copied, device_copy::held},
    {device_copy::copied, device_copy::none},      // a fault or a preemption dropped the copy
    {device_copy::held, device_copy::shared},      // whole prompt on the device: kv_share
    {device_copy::held, device_copy::lost},        // a fault, a failed or lost job, a preemption
    {device_copy::shared, device_copy::lost},
    {device_copy::lost, device_copy::held},        // re-prefilled
    {device_copy::lost, device_copy::recopied},    // re-granted with a cache hit
    {device_copy::recopied, device_copy::held},
    {device_copy::recopied, device_copy::lost},
}};
constexpr bool device_holds(device_copy c) { return c == device_copy::held || c == device_copy::shared; }
constexpr bool copied_in(device_copy c) { return c == device_copy::copied || c == device_copy::recopied; }

struct batch_tick_options {
    int max_inflight = 2;
    std::int64_t max_running = 64;
    schedule_params policy;                  // policy.max_batch: rows per decode job
    std::chrono::nanoseconds kv_wait{std::chrono::seconds(5)};
    kv_sizing kv;                            // runtime.kv_policy (default on_demand), kv_step_tokens, block size
    // A sequence whose jobs were lost to device faults more than this many times in a
    // row fails alone (job_retries_exhausted): one request cannot reset the device forever.
    int max_job_retries = 2;
    // Prefix cache (runtime.prefix_cache): reservations carry the tokens to look up,
    // and a released sequence's valid device KV goes to the KvManager to keep.
    bool prefix_cache = false;
    // Token chaining (runtime.chain_tokens, with a package whose decode programs end in a
    // sampling head and device.sampling_head on): a decoding row drawn on the device may
    // be in two decode jobs at once, the second taking its input token from the first's
    // draw on the device. Stops, deadlines and cancellation are then seen one step behind.
    bool chain_tokens = false;
    // Speculative decoding (runtime.speculative.*, with a package whose decode programs end
    // in a sampling head and device.sampling_head on): rows the head draws may draft.
    model::speculative::speculative_options speculative;
    // Policy input: one more position / a one-token step, for a step of `rows` rows each
    // holding `past` (the engine's: the device's prices, model::speculative::position_cost);
    // unset: model::speculative::k_fixed_position_cost.
    std::function<double(std::int64_t rows, std::int64_t past)> position_cost;
};

class batch_tick_actor : public actor<batch_tick_actor, batch_tick_message> {
public:
    batch_tick_actor(runtime& rt, batch_tick_options options, metrics::calserve_metrics* metrics);
    void wire(address<chip_session_actor> session, address<kv_manager_actor> kv);

    void on_message(batch_tick_message& msg);

    std::size_t sequences() const { return entries_.size(); }
    std::size_t pending() const { return pending_.size(); }
    std::uint64_t preemptions() const { return preemptions_; }
    std::uint64_t stalls() const { return stalls_; }

private:
    struct entry {
        entry(sequence_ptr s, address<request_actor> r, std::uint64_t order);
        seq_phase phase() const { return life.state(); }
        device_copy copy() const { return device.state(); }

        sequence_ptr seq;
        address<request_actor> request;
        std::uint64_t admitted = 0;           // admission order (preemption picks the largest)
        lifecycle<seq_phase, k_seq_table.size()> life;
        lifecycle<device_copy, k_copy_table.size()> device;
        // The tokens its last KV reservation looked up (from position 0); the share sends the
        // same vector when it is exactly the prompt, instead of copying the prompt again.
        std::shared_ptr<const std::vector<token_id>> looked_up;
        int answers_to_skip = 0;              // tokens it went on past (go_on): their answers only count
        int group = k_no_group;               // the slot it last decoded in
        std::chrono::nanoseconds last_served{0};
        // Its tokens once every job holding it has drawn (the BatchTick's own count: the
        // sequence's tokens belong to the jobs' holders meanwhile).
        std::int64_t tokens_after = 0;
        // Speculative decoding: its drafter (null: it never drafts) and recent acceptance.
        std::unique_ptr<model::speculative::drafter> drafter;
        model::speculative::acceptance acceptance;
    };

    void share_prompt(entry& e);
    void on(bt_admit& m);
    void on(bt_kv_granted& m);
    void on(bt_kv_grown& m);
    void on(bt_slot_free& m);
    void on(bt_continue& m);
    void on(bt_finish& m);
    void on(bt_job_lost& m);
    void on(bt_device_down& m);
    void on(bt_device_up& m);
    void on(bt_device_dead& m);
    void on(bt_window_closed& m);
    // After each message: idle with a runnable row and nothing to wake it is a stall
    // (actors/liveness_policy.hpp), reported once per episode.
    void check_liveness();
    std::string describe_rows() const;

    start_input admission_now(std::int64_t ahead) const;
    void admit(bt_admit m);
    void admit_pending();
    void give_up(sequence_id seq, entry& e);
    void request_kv(entry& e, bool front);
    void grow_kv(entry& e, sequence_id preempt);
    void grow_where_needed();
    void preempt(entry& grower);
    bool stop_awaiting(entry& e);
    void release(sequence_id seq);
    enum class job_end : std::uint8_t { completed, failed, lost };
    void job_ended(const std::vector<sequence_id>& rows, job_end how, const std::vector<sequence_id>& unrun = {});
    void one_of_two_ended(entry& e, job_end how, bool ran);
    void last_job_ended(sequence_id seq, entry& e, job_end how);
    static void drop_copy(entry& e);
    bool chainable(const entry& e) const;
    bool would_draft(const entry& e) const;
    double position_cost(std::int64_t rows, std::int64_t past) const;
    std::vector<token_id> draft_for(entry& e, std::int64_t live_rows);
    void verified(const std::vector<verify_outcome>& outcomes);
    void schedule();
    void wake_at_window_end(std::optional<nanoseconds> until);
    std::vector<seq_view> views() const;
    void commit(const job_choice& choice, device::slot slot);
    std::optional<device::slot> free_slot() const;

    batch_tick_options options_;
    metrics::calserve_metrics* metrics_;
    address<chip_session_actor> session_;
    address<kv_manager_actor> kv_;
    std::map<sequence_id, entry> entries_;   // admitted (KV requested or granted)
    std::deque<bt_admit> pending_;           // beyond max_running, FCFS
    std::array<bool, device::k_slot_count> slot_free_{true, true};
    bool device_up_ = true;
    bool dead_ = false;
    // The device generation its last bt_device_down/up named: the jobs it forms carry it
    // (job_context::generation), so the DeviceActor never runs one formed before a reset.
    std::uint64_t device_generation_ = 0;
    tick_state tick_;
    std::optional<nanoseconds> window_wake_;  // the admission window's timer is due then
    timer_handle window_timer_;
    // A job of the current device generation came back refused as not ready: bt_device_up follows.
    bool awaiting_device_up_ = false;
    bool stall_reported_ = false;  // the current stall was reported (liveness_policy)
    std::uint64_t admitted_ = 0;
    std::uint64_t preemptions_ = 0;
    std::uint64_t stalls_ = 0;
};

}  // namespace calserve::actors
