#pragma once
//! Messages a ChipSession accepts.
#include <variant>

#include "actors/job_context.hpp"
#include "config/result.hpp"

namespace calserve::actors {

struct cs_run {                       // BatchTick: run these rows (one prefill, or a decode batch) in this slot
    device::slot slot = device::slot::ping;
    std::vector<sequence_ptr> rows;
    bool prefill = false;
    // Token chaining: rows that are also rows of the other slot's decode job, still in
    // flight, take their input token from its draw on the device (docs/device.md).
    bool chain = false;
    std::uint64_t generation = 0;     // the device generation the rows' KV state was read in
    // Per row, the tokens it drafted (empty: a plain step); empty when no row drafts.
    std::vector<std::vector<token_id>> drafts;
};
struct cs_submitted {                 // DeviceActor: inputs written, infer() accepted
    job_ptr job;
};
struct cs_job_done {                  // DeviceActor: job finished (logits copied out) or failed
    job_ptr job;
    void_result outcome;
};
struct cs_sampled {                   // Sampler: the slot's logits are consumed; job->picks holds each row's answer
    job_ptr job;
};
struct cs_device_down {              // DeviceActor: faulted or reset; jobs not yet done are lost
    job_ptr culprit;                  // the job whose failure was declared, if one was (else null)
    std::uint64_t generation = 0;     // the device generation from now on (its KV starts empty)
};
struct cs_device_up {                 // DeviceActor: recovered (reset + warm-up + golden check)
    std::uint64_t generation = 0;
};
struct cs_device_dead {};             // DeviceActor: gave up

using chip_session_message =
    std::variant<cs_run, cs_submitted, cs_job_done, cs_sampled, cs_device_down, cs_device_up, cs_device_dead>;

}  // namespace calserve::actors
