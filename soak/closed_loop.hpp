#pragma once
//! The closed-loop bench in virtual time (docs/twin.md, section 7): `calserve
//! bench`'s workload (a fixed number of requests kept in flight, each new one
//! sent the instant one finishes; prompts of a fixed length, ignore-EOS greedy
//! outputs of a fixed length) driven into the real engine on the deterministic
//! runtime, on a package and configuration, timed in virtual time.
//!
//! Where the what-if replay keeps a recording's arrival times (open loop), this
//! is the closed-loop client itself: a slower candidate gets its next request
//! later, as a bench client would send it. The figures are virtual time:
//! deterministic, independent of the load of the machine running it.
//!
//! Fault model: a configuration or package that does not open is an error before
//! anything runs; a run whose requests do not all finish within `limit_s` virtual
//! seconds reports what finished (the violations say so).
//! Invariants: at most `concurrency` requests in flight; requests are sent in
//! order r0, r1, ...; the first `warmup` to be sent are not in the summary.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "config/result.hpp"
#include "soak/what_if.hpp"

namespace calserve::soak {

struct closed_loop_options {
    std::filesystem::path package_dir;     // sim backend (its latency model prices virtual time)
    std::vector<std::string> overrides;    // config key=value
    int concurrency = 8;
    int requests = 40;                     // measured
    int warmup = 0;                        // sent first, not measured
    std::int64_t prompt_tokens = 512;
    std::int64_t output_tokens = 64;
    std::uint64_t seed = 1;                // prompts' token ids
    double limit_s = 3600;                 // virtual seconds
};

struct closed_loop_outcome {
    run_summary summary;                   // measured requests, virtual time
    engine_summary engine;
    std::vector<request_times> rows;       // measured requests, in finishing order
    std::vector<std::string> violations;   // the simulation's invariant checks
};

result<closed_loop_outcome> run_closed_loop(const closed_loop_options& o);

}  // namespace calserve::soak
