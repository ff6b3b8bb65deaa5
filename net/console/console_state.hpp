#pragma once
//! console_state: the JSON the web console's engine view polls at
//! GET /v1/console/state (docs/api.md, docs/console.md).
//!
//! Role: one cheap, thread-safe snapshot of the engine for a browser: device
//! state and its recent transitions (with the fault behind each recovery), the
//! ping/pong slots and their recent jobs, running/waiting requests, KV blocks,
//! batch sizes, fault fires and resets, TTFT/TPOT percentiles.
//! Invariants: reads only atomics (health, metric values), the fault registry
//! (its own mutex) and the engine journal (a short copy under its mutex); it
//! never posts to an actor nor waits for one, so any io thread may call it.
#include <cstdint>
#include <string>

#include "metrics/metrics.hpp"
#include <functional>

#include "engine/serving_engine.hpp"

namespace calserve::net {

// Jobs returned by one call at most (the newest ones), whatever `since_job` asks.
inline constexpr std::size_t k_console_jobs_per_poll = 128;

// A percentile estimated from a histogram's buckets (linear within the bucket
// that holds it; the overflow bucket reports the last bound). NaN when empty.
double histogram_quantile(const metrics::histogram& h, double q);

class console_state {
public:
    // `metrics` may be null (the metric-derived fields are then absent).
    console_state(engine::serving_engine& engine, metrics::calserve_metrics* metrics)
        : engine_of_([&engine] { return std::shared_ptr<engine::serving_engine>(std::shared_ptr<engine::serving_engine>{}, &engine); }),
          metrics_(metrics) {}
    // Several models: the view follows the primary model's serving generation.
    console_state(std::function<std::shared_ptr<engine::serving_engine>()> engine_of,
                  metrics::calserve_metrics* metrics)
        : engine_of_(std::move(engine_of)), metrics_(metrics) {}

    // The snapshot as JSON; jobs with a sequence number above `since_job` only.
    std::string render(std::uint64_t since_job) const;

private:
    std::function<std::shared_ptr<engine::serving_engine>()> engine_of_;
    metrics::calserve_metrics* metrics_;
};

}  // namespace calserve::net
