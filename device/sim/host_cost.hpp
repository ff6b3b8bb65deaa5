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

private:
    std::array<double, 2> rate_{};  // ns per unit of work, by kind
};

}  // namespace calserve::device::sim
