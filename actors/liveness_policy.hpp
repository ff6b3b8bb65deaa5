#pragma once
//! Liveness of the BatchTick as a pure function (STYLE 6): whether the scheduler, idle
//! after a message, can still be woken. The BatchTick forms jobs only when a message
//! comes (a job's end, a Request's answer, a KV answer, the device coming up, its own
//! admission-window timer); idle with a runnable row, a free slot, a ready device and
//! none of those to come, it would wait forever (the requests time out one by one).
//!
//! Nothing to come means: no job in flight (its end frees a slot and plans again), no
//! row awaiting its Request's answer (the answer plans again), no kv_grow out, no
//! admission-window timer armed, and no job refused by a device that said it is not
//! ready (bt_device_up follows). A runnable row is one holding KV that no job, no
//! Request's answer and no KV request holds (`ready`): with all of the above,
//! `plan_next_job` always forms a job for it or the admission window holds it (and then
//! a timer is armed), so a stall here is a scheduling bug, reported by the BatchTick as
//! an error, a counter (calserve_scheduler_stalls_total) and a runtime failure (which
//! fails a test or a soak seed).
#include <cstdint>

namespace calserve::actors {

struct idle_input {
    bool device_up = false;          // the BatchTick believes the device serves (up, not dead)
    bool awaiting_device_up = false; // a job of the current device generation was refused as not ready
    bool slot_free = false;          // a slot the BatchTick may fill is free
    bool job_in_flight = false;      // a slot carries a job
    bool window_timer = false;       // the admission window's timer is armed
    std::int64_t ready = 0;          // rows holding KV that nothing holds (phase ready)
    std::int64_t awaiting = 0;       // rows whose Request's answer is still to come
    std::int64_t kv_out = 0;         // rows with a kv_grow out
};

// True when nothing that could form a job is still to come although a row could run.
bool idle_is_stalled(const idle_input& in);

}  // namespace calserve::actors
