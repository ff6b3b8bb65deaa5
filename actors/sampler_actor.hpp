#pragma once
//! Sampler: the sampling maths (model/sampling/sampling.hpp) on what the device returned.
//!
//! One message per job: every live row the device's sampling head did not draw
//! (docs/device.md, "Sampling head"; a prefill's row always) is sampled with its
//! own parameters, seed and history, from its BF16 logits, or, for a row in head
//! mode `top_k`, from the head's top K and log_z (the same token and logprobs as
//! from the whole row). A decode job whose rows the head drew all never comes
//! here: the ChipSession applies the draws and goes on. Stateless per
//! message: the RNG state and token history travel with the sequence, so a
//! request's draws depend only on its own seed and history, never on thread
//! count, interleaving or which other rows shared its batch. Rows are split over
//! a small pool (`threads`, the caller working too), one scratch sampler per
//! share, when the batch is large enough to pay for the wake-up. BF16 -> FP32
//! conversion happens inside the sampler only as far as needed (greedy is one
//! fused pass). The chosen token is appended to its sequence here, so the next
//! job feeds it. Replies go to the ChipSession, whose slot then frees.
//! Fault point `sampler_stall` delays the reply by its delay_ms (bounded by
//! k_sampler_stall_max) to exercise slot timeouts and the watchdog.
#include <memory>

#include "actors/runtime/actor.hpp"
#include "actors/sampler_messages.hpp"
#include "model/sampling/sampling.hpp"

namespace calserve::metrics {
struct calserve_metrics;
}

namespace calserve::device {
class fault_registry;
}
namespace calserve::model {
class thread_pool;
}

namespace calserve::actors {

class chip_session_actor;

inline constexpr std::chrono::milliseconds k_sampler_stall_max{60000};

// Samples every live row of `job` the head did not draw into job.picks and appends
// each chosen token to its sequence. Rows are split into at most samplers.size() shares run on `pool`
// (null: inline); share i uses samplers[i] only, so no scratch is shared.
void sample_batch(job_context& job, std::span<model::sampler> samplers, model::thread_pool* pool);

struct sampler_options {
    int threads = 1;                                     // rows sampled in parallel (1 = inline)
    std::shared_ptr<device::fault_registry> faults;      // sampler_stall; may be null
};

class sampler_actor : public actor<sampler_actor, sampler_message> {
public:
    sampler_actor(runtime& rt, sampler_options options, metrics::calserve_metrics* metrics);
    ~sampler_actor() override;
    void wire(address<chip_session_actor> session) { session_ = std::move(session); }

    void on_message(sampler_message& msg);

private:
    void on(sm_sample& m);
    std::chrono::nanoseconds stall_of(const job_context& job);

    address<chip_session_actor> session_;
    sampler_options options_;
    metrics::calserve_metrics* metrics_;
    std::unique_ptr<model::thread_pool> pool_;   // null when threads == 1
    std::vector<model::sampler> samplers_;       // one per share of a batch
};

}  // namespace calserve::actors
