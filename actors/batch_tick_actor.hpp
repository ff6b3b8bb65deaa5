#pragma once
//! BatchTick: the session's scheduler. Forms the next job whenever a slot frees.
//!
//! Owns the table of admitted sequences and which slots are free. Policy is
//! `plan_next_job` (actors/schedule_policy.hpp); this actor only applies it.
//! Batch-1 programs today: one sequence per job; `max_inflight` slots (1 or 2)
//! so two runnable sequences alternate on ping/pong. A B4/B8/B16 profile would
//! replace `job_choice` by a set of sequences per job with the same protocol.
//!
//! Per sequence: job_active (a job holds it: ChipSession/Device/Sampler),
//! awaiting (its token went to the Request, which answers continue/finish),
//! finishing (terminal: release once no job holds it), reprefill (the device
//! lost its KV: the next job re-prefills prompt + generated tokens).
//! Invariants: a sequence is in at most one job; KV is released exactly once,
//! and never while a job holds the sequence; a slot carries one job at a time.
#include <array>
#include <deque>
#include <map>

#include "actors/actor.hpp"
#include "actors/batch_tick_messages.hpp"
#include "actors/schedule_policy.hpp"

namespace calserve::actors {

class chip_session_actor;
class kv_manager_actor;
class device_actor;
class request_actor;
namespace metrics {
struct calserve_metrics;
}

struct batch_tick_options {
    int max_inflight = 2;
    std::int64_t max_running = 64;
    schedule_params policy;
    std::chrono::nanoseconds kv_wait{std::chrono::seconds(5)};
};

class batch_tick_actor : public actor<batch_tick_actor, batch_tick_message> {
public:
    batch_tick_actor(runtime& rt, batch_tick_options options, metrics::calserve_metrics* metrics);
    void wire(address<chip_session_actor> session, address<kv_manager_actor> kv, address<device_actor> device);

    void on_message(batch_tick_message& msg);

    std::size_t sequences() const { return entries_.size(); }
    std::size_t pending() const { return pending_.size(); }

private:
    struct entry {
        sequence_ptr seq;
        address<request_actor> request;
        bool kv_granted = false;
        bool job_active = false;
        bool awaiting = false;
        bool finishing = false;
        bool reprefill = false;
        bool started = false;
        std::chrono::nanoseconds last_served{0};
    };

    void on(bt_admit& m);
    void on(bt_kv_granted& m);
    void on(bt_slot_free& m);
    void on(bt_continue& m);
    void on(bt_finish& m);
    void on(bt_job_lost& m);
    void on(bt_device_down& m);
    void on(bt_device_up& m);
    void on(bt_device_dead& m);

    void admit_pending();
    void request_kv(entry& e);
    void release(sequence_id seq);
    void schedule();
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
};

}  // namespace calserve::actors
