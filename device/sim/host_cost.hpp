#pragma once
//! What a job costs the host that computes it: the simulator's reference model in
//! real-time mode and the `cpu` backend run every job on the host CPU, so how long
//! a job takes there is part of how long the runtime must wait for it.
//!
//! Role: `expected_completion` (device/device.hpp) adds this estimate to the
//! modelled timing, and the DeviceActor bounds its Wait by a multiple of the sum
//! (docs/faults.md, "Wait bounds"), so a long prefill is never mistaken for a hung
//! device while a hung one is still found.
//!
//! The estimate is a measured rate times the job's work. Work counts each live
//! row's tokens, weighted for attention: a token that attends to `p` earlier
//! positions counts 1 + p / k_attention_span (a prefill of T tokens from empty
//! weighs T x (1 + T / 2 / span)). Rates are per kind (prefill, decode), learned
//! from measured jobs: a slower sample raises the rate at once, a faster one lowers
//! it by a tenth of the gap, so a host that slows down stretches every later bound
//! and a quiet spell does not shrink them at once. Until the first sample of a
//! kind, the other kind's rate stands in (a prefill's rate overestimates a decode
//! step); with no sample at all the estimate is 0 and the configured floor holds.
//!
//! A decode program's step (plain rows, or verify rows of 1 + k positions) reads the
//! weights once whatever its positions, so its time is not a rate times the work: a
//! second estimate fits fixed + rate x work by least squares over the recent steps
//! (each older step weighing 0.97 of the next), for pricing a step not yet submitted
//! (sim_device::decode_cost, the drafting policy's cost of a position). It tells
//! nothing until the steps seen differ enough in work to tell the two terms apart.
//!
//! Fault model: none (numbers only). Not thread-safe: the simulator guards it.
#include <array>
#include <cstdint>
#include <span>

namespace calserve::device::sim {

enum class job_kind : std::uint8_t { prefill, decode };

class host_cost_model {
public:
    static constexpr double k_attention_span = 512;

    // Work of a job whose live rows held `pasts[i]` tokens and each add `tokens`.
    static double work(std::int64_t tokens, std::span<const std::int64_t> pasts);

    // A measured job: `ns` of host compute for `work`.
    void observe(job_kind kind, double work, double ns);
    // Expected host compute of `work` (0 before any observation).
    double estimate_ns(job_kind kind, double work) const;
    double rate_ns(job_kind kind) const;  // per unit of work; 0 when unknown

    // A measured decode-program step of `work`, and the fitted fixed + rate x work for
    // `work` (0 while unknown: too few steps, or all of about the same work).
    void observe_step(double work, double ns);
    double step_estimate_ns(double work) const;

private:
    std::array<double, 2> rate_{};  // ns per unit of work, by kind
    struct sums {
        double n = 0, x = 0, y = 0, xx = 0, xy = 0;
    } steps_;  // decayed sums over decode-program steps: x = work, y = ns
};

}  // namespace calserve::device::sim
