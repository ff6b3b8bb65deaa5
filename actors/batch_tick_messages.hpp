#pragma once
//! Messages the BatchTick (scheduler) accepts.
#include <variant>
#include <vector>

#include "actors/runtime/actor.hpp"
#include "actors/sequence.hpp"
#include "device/types.hpp"

namespace calserve::actors {

class request_actor;

// A new request's sequence, after the engine admitted it.
struct bt_admit {
    sequence_ptr seq;
    address<request_actor> request;
};
struct bt_kv_granted {
    sequence_id seq = 0;
    void_result outcome;
    std::int64_t cached_tokens = 0;  // a prefix cache hit: KV of the first tokens is being copied in
};
// Answer to a kv_grow: the sequence's reservation now holds `tokens`, or kv_full (preempt).
struct bt_kv_grown {
    sequence_id seq = 0;
    std::int64_t tokens = 0;
    void_result outcome;
};
// What a verify row of a finished job did (speculative decoding): drafts sent, kept, and
// the tokens it emitted (the Request answers each of them).
struct verify_outcome {
    sequence_id seq = 0;
    std::int64_t drafted = 0;
    std::int64_t accepted = 0;
    std::int64_t emitted = 0;
};
// A slot finished its job (tokens sampled or job failed): the job's live rows.
// `unrun` rows did not advance (another row's fault refused the job) and get no
// token: they are ready again as they were.
struct bt_slot_free {
    device::slot slot = device::slot::ping;
    std::vector<sequence_id> rows;
    std::vector<sequence_id> unrun;
    // Sampled rows whose token cannot have ended them (sequence_state::cannot_have_ended):
    // schedulable at once; their Request's answer for that token is then only counted.
    std::vector<sequence_id> go_on;
    std::vector<verify_outcome> verified;  // its verify rows that ran
};
// The Request consumed its token and wants the next one.
struct bt_continue {
    sequence_id seq = 0;
};
// The Request reached a terminal state: release when no job is in flight.
struct bt_finish {
    sequence_id seq = 0;
};
// A job that was in flight when the device faulted, or that the device refused: its slot
// is free, no token comes.
struct bt_job_lost {
    device::slot slot = device::slot::ping;
    std::vector<sequence_id> rows;
    bool culprit = false;  // this job's failure caused the fault (not merely in flight beside it)
    std::uint64_t generation = 0;  // the device generation the job was formed in (cs_run)
};
// The device faulted or was reset: its KV is gone; `generation` is the one jobs run in next.
struct bt_device_down {
    std::uint64_t generation = 0;
};
struct bt_device_up {
    std::uint64_t generation = 0;
};
// The device is dead: every sequence fails.
struct bt_device_dead {};
// Its own timer: the admission window (schedule_policy: admit_window_until) closed.
struct bt_window_closed {};

using batch_tick_message = std::variant<bt_admit, bt_kv_granted, bt_kv_grown, bt_slot_free, bt_continue, bt_finish, bt_job_lost,
                                        bt_device_down, bt_device_up, bt_device_dead, bt_window_closed>;

}  // namespace calserve::actors
