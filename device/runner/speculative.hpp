#pragma once
//! `calserve runner speculative`: speculative decoding on the device interface alone
//! (no scheduler, actors or server). The same requests are generated twice on one
//! device, plain (one token per row per decode step, drawn by the sampling head) and
//! drafting (n-gram drafts verified in one job per step, device/sampling_head.hpp), and
//! the verdict is that both give the same tokens, bit for bit; the report carries the
//! tokens per second of each (device time: virtual on the simulator, so independent of
//! the machine's load; wall time for the cpu backend) and the acceptance rate.
//!
//! Each step is one decode job of the smallest batch profile with a sampling head that
//! holds the live rows; a row drafts what the policy allows (model/speculative), its
//! rejected positions are dropped with kv_keep before its next step. A request stops at
//! max_tokens only (EOS is not a stop here: synthetic weights would end at random).
//! Workloads: `repeat` (prompts repeating a span of their own tokens) or `random`.
#include <cstdint>
#include <string>
#include <vector>

#include "device/runner/runner.hpp"
#include "model/speculative/options.hpp"

namespace calserve::device::runner {

struct speculative_options {
    int sequences = 1;              // rows per step
    int prompt_tokens = 64;
    int max_tokens = 128;
    float temperature = 0;          // 0 = greedy; else seeded sampling with top_p 1
    std::uint64_t seed = 1;
    std::string workload = "repeat";  // repeat | random
    model::speculative::speculative_options spec;  // drafter and policy of the drafting run
    double position_cost = -1;      // policy input; < 0 = from the device's latency (or 0.1)
    timeout wait_limit = std::chrono::seconds(60);
};

struct generation_stats {
    std::vector<std::vector<model::token_id>> tokens;  // per request, generated only
    std::int64_t steps = 0, drafted = 0, accepted = 0;
    double device_s = 0;  // sum of the jobs' submit-to-completion times (device clock)
    double wall_s = 0;
};

// One run over the requests the options describe; `drafting` picks plain or drafting.
result<generation_stats> generate(device& dev, const speculative_options& o, bool drafting);
// Both runs, compared: pass when the tokens are identical.
runner_report run_speculative(device& dev, const speculative_options& o);

}  // namespace calserve::device::runner
