#include "net/console/console_state.hpp"

#include <boost/json.hpp>
#include <algorithm>
#include <cmath>

#include "config/json_text.hpp"
#include "actors/engine_journal.hpp"
#include "device/fault_points.hpp"

namespace calserve::net {
namespace json = boost::json;

namespace {
double ms_of(std::int64_t ns) { return double(ns) / 1e6; }

// Counters and gauges that count things are doubles in the registry; JSON gets integers.
std::int64_t count_of(double v) { return std::int64_t(std::llround(v)); }

json::value number_or_null(double v) { return std::isfinite(v) ? json::value(v) : json::value(nullptr); }

json::object percentiles(const metrics::histogram& h) {
    return json::object{{"count", h.count()},
                        {"p50", number_or_null(histogram_quantile(h, 0.50))},
                        {"p90", number_or_null(histogram_quantile(h, 0.90))},
                        {"p99", number_or_null(histogram_quantile(h, 0.99))}};
}

json::array jobs_json(const std::vector<actors::journal_job>& jobs) {
    json::array out;
    const std::size_t first = jobs.size() > k_console_jobs_per_poll ? jobs.size() - k_console_jobs_per_poll : 0;
    for (std::size_t i = first; i < jobs.size(); ++i) {
        const auto& j = jobs[i];
        out.push_back(json::object{{"seq", j.seq},
                                   {"slot", j.slot == 0 ? "ping" : "pong"},
                                   {"kind", j.prefill ? "prefill" : "decode"},
                                   {"rows", j.rows},
                                   {"profile", j.profile},
                                   {"tokens", j.tokens},
                                   {"start_ms", ms_of(j.start_ns)},
                                   {"device_done_ms", j.device_done_ns > 0 ? json::value(ms_of(j.device_done_ns))
                                                                           : json::value(nullptr)},
                                   {"end_ms", ms_of(j.end_ns)},
                                   {"outcome", actors::to_string(j.outcome)}});
    }
    return out;
}

json::object device_json(engine::serving_engine& engine, const actors::engine_journal::snapshot& snap) {
    auto h = engine.health();
    json::array transitions;
    for (const auto& e : snap.device_events) {
        transitions.push_back(json::object{
            {"seq", e.seq}, {"at_ms", ms_of(e.at_ns)}, {"from", e.from}, {"to", e.to}, {"note", e.note}});
    }
    json::object fires;
    auto& reg = *engine.faults();
    for (auto p : device::all_fault_points)
        if (auto n = reg.fires(p); n > 0) fires[device::to_string(p)] = n;
    return json::object{{"state", h.device_state},
                        {"ready", h.ready},
                        {"healthy", h.healthy},
                        {"resets", engine.device_resets()},
                        {"transitions", std::move(transitions)},
                        {"fault_fires", std::move(fires)}};
}
}  // namespace

double histogram_quantile(const metrics::histogram& h, double q) {
    const auto bounds = h.bounds();
    std::uint64_t total = 0;
    for (std::size_t i = 0; i <= bounds.size(); ++i) total += h.bucket_count(i);
    if (total == 0) return std::nan("");
    const double rank = q * double(total);
    double seen = 0;
    for (std::size_t i = 0; i <= bounds.size(); ++i) {
        const double n = double(h.bucket_count(i));
        if (n > 0 && seen + n >= rank) {
            if (i == bounds.size()) return bounds.empty() ? std::nan("") : bounds.back();
            const double lo = i == 0 ? 0.0 : bounds[i - 1];
            return lo + (bounds[i] - lo) * std::clamp((rank - seen) / n, 0.0, 1.0);
        }
        seen += n;
    }
    return bounds.empty() ? std::nan("") : bounds.back();
}

std::string console_state::render(std::uint64_t since_job) const {
    auto held = engine_of_();
    if (!held) return json_text(json::object{{"error", "no model is serving"}});
    auto& engine = *held;
    const auto snap = engine.journal().read(since_job);
    json::object o{{"now_ms", ms_of(engine.now().count())},
                   {"model", engine.card().name},
                   {"backend", engine.card().backend},
                   {"last_job", snap.last_job}};
    o["device"] = device_json(engine, snap);
    o["slots"] = json::array{json::object{{"name", "ping"}, {"state", snap.slots[0]}},
                             json::object{{"name", "pong"}, {"state", snap.slots[1]}}};
    o["jobs"] = jobs_json(snap.jobs);
    auto h = engine.health();
    json::object requests{{"in_flight", engine.in_flight()}, {"running", h.running}, {"waiting", h.waiting}};
    if (metrics_) {
        const auto& m = *metrics_;
        o["kv"] = json::object{{"blocks_used", count_of(m.kv_blocks_used.value())}, {"blocks_total", count_of(m.kv_blocks_capacity.value())}};
        const double queried = m.prefix_cache_queries.value(), hits = m.prefix_cache_hits.value();
        o["prefix_cache"] = json::object{{"blocks", count_of(m.prefix_cache_blocks.value())},
                                         {"queried_tokens", count_of(queried)},
                                         {"hit_tokens", count_of(hits)},
                                         {"hit_rate", queried > 0 ? json::value(hits / queried) : json::value(nullptr)},
                                         {"evictions", count_of(m.prefix_cache_evictions.value())}};
        // Speculative decoding: drafted tokens and the share the device's draws kept.
        const double drafted = m.spec_drafted_tokens.value(), accepted = m.spec_accepted_tokens.value();
        o["speculative"] = json::object{{"verify_rows", count_of(m.spec_verify_rows.value())},
                                        {"drafted_tokens", count_of(drafted)},
                                        {"accepted_tokens", count_of(accepted)},
                                        {"acceptance_rate", drafted > 0 ? json::value(accepted / drafted) : json::value(nullptr)}};
        requests["recovered"] = count_of(m.requests_recovered.value());
        requests["preemptions"] = count_of(m.preemptions_total.value());
        const auto batches = m.batch_size.count();
        o["batch"] = json::object{
            {"decode_jobs", batches},
            {"mean_rows", batches > 0 ? json::value(m.batch_size.sum() / double(batches)) : json::value(nullptr)},
            {"padding_rows", count_of(m.batch_padding_rows.value())}};
        o["latency"] = json::object{{"ttft_s", percentiles(m.time_to_first_token)},
                                    {"tpot_s", percentiles(m.inter_token_latency)}};
        o["tokens"] = json::object{{"prompt", count_of(m.prompt_tokens_total.value())},
                                   {"generated", count_of(m.generation_tokens_total.value())}};
    }
    o["requests"] = std::move(requests);
    return json_text(o);
}

}  // namespace calserve::net
