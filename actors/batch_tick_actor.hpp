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
//! KV (runtime.kv_policy): `reserve` holds prompt + max_tokens from admission;
//! `on_demand` holds the prompt plus `kv_step_tokens` and grows before a job
//! would pass the reservation (kv_grow). A grow that finds no free block
//! preempts by recompute: the most recently admitted sequence not in a job
//! (maybe the grower itself) gives its KV back and re-queues, ahead of new
//! admissions, to re-prefill prompt + the tokens generated so far. The client
//! sees a pause, never an error or a duplicated token.
//!
//! Per sequence: job_active (a job holds it: ChipSession/Device/Sampler),
//! awaiting (its token went to the Request, which answers continue/finish),
//! finishing (terminal: release once no job holds it), reprefill (the device
//! lost its KV: the next job re-prefills prompt + generated tokens), growing (a
//! kv_grow is out), group (the slot it last decoded in). A row whose token cannot
//! have ended it (bt_slot_free::go_on) stops awaiting at once: the batch need not
//! wait for its Request, whose answer for that token is then only counted.
//! Prefix cache: a grant that hit starts the sequence at `cached_tokens` on the
//! device (its prefill feeds the rest); a device fault drops the cache.
//! Invariants: a sequence is in at most one job; KV is released exactly once,
//! and never while a job holds the sequence; a slot carries one job at a time;
//! a job never feeds a sequence past its reservation (tokens <= kv_tokens).
#include <array>
#include <deque>
#include <map>

#include "actors/runtime/actor.hpp"
#include "actors/batch_tick_messages.hpp"
#include "actors/schedule_policy.hpp"

namespace calserve::metrics {
struct calserve_metrics;
}

namespace calserve::actors {

class chip_session_actor;
class kv_manager_actor;
class device_actor;
class request_actor;

enum class kv_policy : std::uint8_t { on_demand, reserve };

struct batch_tick_options {
    int max_inflight = 2;
    std::int64_t max_running = 64;
    schedule_params policy;                  // policy.max_batch: rows per decode job
    std::chrono::nanoseconds kv_wait{std::chrono::seconds(5)};
    kv_policy kv = kv_policy::reserve;
    std::int64_t kv_step_tokens = 64;        // on_demand: room beyond the prompt, and the growth step
    std::int64_t kv_block_tokens = 256;
    // A sequence whose jobs were lost to device faults more than this many times in a
    // row fails alone (job_retries_exhausted): one request cannot reset the device forever.
    int max_job_retries = 2;
    // Prefix cache (runtime.prefix_cache): reservations carry the tokens to look up,
    // and a released sequence's valid device KV goes to the KvManager to keep.
    bool prefix_cache = false;
};

class batch_tick_actor : public actor<batch_tick_actor, batch_tick_message> {
public:
    batch_tick_actor(runtime& rt, batch_tick_options options, metrics::calserve_metrics* metrics);
    void wire(address<chip_session_actor> session, address<kv_manager_actor> kv, address<device_actor> device);

    void on_message(batch_tick_message& msg);

    std::size_t sequences() const { return entries_.size(); }
    std::size_t pending() const { return pending_.size(); }
    std::uint64_t preemptions() const { return preemptions_; }

private:
    struct entry {
        sequence_ptr seq;
        address<request_actor> request;
        std::uint64_t admitted = 0;           // admission order (preemption picks the largest)
        bool kv_granted = false;
        bool job_active = false;
        bool in_prefill = false;              // the active job is its prefill
        bool awaiting = false;
        bool finishing = false;
        bool reprefill = false;
        bool started = false;
        bool on_device = false;               // a job ran it: the next one decodes unless reprefill
        bool growing = false;
        int answers_to_skip = 0;              // tokens it went on past (go_on): their answers only count
        int group = k_no_group;
        std::chrono::nanoseconds last_served{0};
    };

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

    void admit_pending();
    void give_up(sequence_id seq, entry& e);
    void request_kv(entry& e, bool front);
    void grow_kv(entry& e, sequence_id preempt);
    void preempt(entry& grower);
    void release(sequence_id seq);
    enum class job_end : std::uint8_t { completed, failed, lost };
    void job_ended(const std::vector<sequence_id>& rows, job_end how);
    void schedule();
    bool needs_room(const entry& e) const;
    std::vector<seq_view> views();
    void commit(const job_choice& choice, device::slot slot);
    std::int64_t round_to_blocks(const entry& e, std::int64_t tokens) const;
    std::optional<device::slot> free_slot() const;

    batch_tick_options options_;
    metrics::calserve_metrics* metrics_;
    address<chip_session_actor> session_;
    address<kv_manager_actor> kv_;
    address<device_actor> device_;
    std::map<sequence_id, entry> entries_;   // admitted (KV requested or granted)
    std::deque<bt_admit> pending_;           // beyond max_running, FCFS
    std::array<bool, device::k_slot_count> slot_free_{true, true};
    bool device_up_ = true;
    bool dead_ = false;
    tick_state tick_;
    std::uint64_t admitted_ = 0;
    std::uint64_t preemptions_ = 0;
};

}  // namespace calserve::actors
