#pragma once
//! Sampler: the sampling maths (model/sampling.hpp) on logits from the device.
//!
//! Stateless per message: the RNG state and token history travel with the
//! sequence (a request's draws depend only on its own seed and history, not on
//! thread count or interleaving). BF16 -> FP32 conversion happens inside the
//! sampler only as far as needed (greedy is one fused pass). The chosen token
//! is appended to the sequence here, so the next job feeds it. Replies go to
//! the ChipSession, whose slot then frees. Fault point `sampler_stall` delays
//! the reply (bounded) to exercise the slot timeouts.
#include "actors/actor.hpp"
#include "actors/sampler_messages.hpp"
#include "model/sampling.hpp"

namespace calserve::actors {

class chip_session_actor;
namespace metrics {
struct calserve_metrics;
}

class sampler_actor : public actor<sampler_actor, sampler_message> {
public:
    sampler_actor(runtime& rt, metrics::calserve_metrics* metrics);
    void wire(address<chip_session_actor> session) { session_ = std::move(session); }
    void on_message(sampler_message& msg);

private:
    void on(sm_sample& m);

    address<chip_session_actor> session_;
    metrics::calserve_metrics* metrics_;
    model::sampler sampler_;
};

}  // namespace calserve::actors
