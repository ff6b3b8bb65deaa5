// The what-if replay: summaries, JSON and tables (see what_if.hpp).
#include "soak/what_if.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <cstdio>
#include <map>

#include "loadgen/stats.hpp"

namespace calserve::soak {
namespace json = boost::json;
namespace {

constexpr double k_ns_per_ms = 1e6;

percentiles percentiles_of(std::vector<double> xs) {
    percentiles p;
    p.count = xs.size();
    if (xs.empty()) return p;
    p.p50 = loadgen::percentile(xs, 50);
    p.p90 = loadgen::percentile(xs, 90);
    p.p99 = loadgen::percentile(xs, 99);
    return p;
}

request_times times_of(std::string id, double submit_ms, double ttft_ms, double e2e_ms, std::int64_t tokens) {
    request_times t{std::move(id), submit_ms, ttft_ms, -1, e2e_ms, tokens};
    if (ttft_ms >= 0)
        if (auto tpot = loadgen::request_tpot(e2e_ms, ttft_ms, tokens)) t.tpot_ms = *tpot;
    return t;
}

json::object to_json(const percentiles& p) { return {{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"count", p.count}}; }

json::object to_json(const run_summary& s) {
    return {{"requests", s.requests},          {"ttft_ms", to_json(s.ttft_ms)},     {"tpot_ms", to_json(s.tpot_ms)},
            {"e2e_ms", to_json(s.e2e_ms)},     {"output_tokens", s.output_tokens},  {"window_s", s.window_s},
            {"output_tok_s", s.output_tok_s},  {"met_slo", s.met_slo},              {"goodput_rps", s.goodput_rps},
            {"max_gap_ms", s.max_gap_ms}};
}

std::string fixed(double v, int decimals = 1) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return buf;
}

std::string row(const std::string& label, const run_summary& s, const std::string& extra) {
    char buf[320];
    std::snprintf(buf, sizeof buf, "%-22s %8s %8s %8s %8s %8s %8s %9s %8s  %s\n", label.c_str(),
                  fixed(s.ttft_ms.p50).c_str(), fixed(s.ttft_ms.p90).c_str(), fixed(s.ttft_ms.p99).c_str(),
                  fixed(s.tpot_ms.p50, 2).c_str(), fixed(s.tpot_ms.p90, 2).c_str(), fixed(s.tpot_ms.p99, 2).c_str(),
                  fixed(s.output_tok_s).c_str(), fixed(s.goodput_rps, 2).c_str(), extra.c_str());
    return buf;
}

}  // namespace

std::vector<request_times> predicted_times(std::span<const sim_request> outcomes) {
    std::vector<request_times> rows;
    for (const auto& o : outcomes) {
        const double ttft = o.first_token_ns < 0 ? -1 : double(o.first_token_ns - o.submit_ns) / k_ns_per_ms;
        rows.push_back(times_of(o.id, double(o.submit_ns) / k_ns_per_ms, ttft, double(o.finish_ns - o.submit_ns) / k_ns_per_ms,
                                o.output_tokens));
        rows.back().max_gap_ms = double(o.max_gap_ns) / k_ns_per_ms;
    }
    return rows;
}

std::vector<request_times> recorded_times(const io::trace_file& trace) {
    std::map<std::string, std::int64_t> arrival;
    for (const auto& in : trace.inputs)
        if (auto* s = std::get_if<io::trace_submit>(&in)) arrival.emplace(s->id, s->t_ns);
    std::vector<request_times> rows;
    for (const auto& d : trace.done) {
        auto it = arrival.find(d.id);
        if (it == arrival.end()) continue;  // submitted before a window trace began
        const double ttft = d.ttft_ns < 0 ? -1 : double(d.ttft_ns) / k_ns_per_ms;
        rows.push_back(times_of(d.id, double(it->second) / k_ns_per_ms, ttft, double(d.e2e_ns) / k_ns_per_ms, d.output_tokens));
    }
    return rows;
}

run_summary summarize(std::span<const request_times> rows, const slo_targets& slo) {
    run_summary s;
    s.requests = rows.size();
    if (rows.empty()) return s;
    std::vector<double> ttft, tpot, e2e;
    double first = rows.front().submit_ms, last = 0;
    for (const auto& r : rows) {
        first = std::min(first, r.submit_ms);
        last = std::max(last, r.submit_ms + r.e2e_ms);
        s.output_tokens += r.output_tokens;
        s.max_gap_ms = std::max(s.max_gap_ms, r.max_gap_ms);
        e2e.push_back(r.e2e_ms);
        if (r.ttft_ms >= 0) ttft.push_back(r.ttft_ms);
        if (r.tpot_ms >= 0) tpot.push_back(r.tpot_ms);
        const bool ttft_ok = slo.ttft_ms <= 0 || (r.ttft_ms >= 0 && r.ttft_ms <= slo.ttft_ms);
        const bool tpot_ok = slo.tpot_ms <= 0 || r.tpot_ms < 0 || r.tpot_ms <= slo.tpot_ms;
        if (r.output_tokens > 0 && ttft_ok && tpot_ok) ++s.met_slo;
    }
    s.ttft_ms = percentiles_of(std::move(ttft));
    s.tpot_ms = percentiles_of(std::move(tpot));
    s.e2e_ms = percentiles_of(std::move(e2e));
    s.window_s = (last - first) / 1e3;
    if (s.window_s > 0) {
        s.output_tok_s = double(s.output_tokens) / s.window_s;
        s.goodput_rps = double(s.met_slo) / s.window_s;
    }
    return s;
}

result<what_if_report> run_what_if(const io::trace_file& trace, const replay_options& options, const slo_targets& slo,
                                   std::string label) {
    auto o = options;
    o.stop_at_divergence = false;  // the whole workload, whatever the stream does
    auto r = run_replay(trace, o);
    if (!r) return r.error();
    what_if_report w;
    w.label = std::move(label);
    w.predicted_rows = predicted_times(r->outcomes);
    w.predicted = summarize(w.predicted_rows, slo);
    w.recorded_rows = recorded_times(trace);
    if (!w.recorded_rows.empty()) w.recorded = summarize(w.recorded_rows, slo);
    const auto& f = r->figures;
    if (w.predicted.window_s > 0) w.engine.device_busy_fraction = f.device_busy_s / w.predicted.window_s;
    if (f.kv_blocks_capacity > 0) w.engine.kv_peak_fraction = double(f.kv_blocks_peak) / double(f.kv_blocks_capacity);
    w.engine.preemptions = r->report.preemptions;
    w.engine.drafted = r->report.drafted_tokens;
    w.engine.accepted = r->report.accepted_tokens;
    if (f.prefix_cache_queries > 0) w.engine.prefix_cache_hit_rate = f.prefix_cache_hits / f.prefix_cache_queries;
    w.messages_compared = r->compared;
    w.stream_identical = !r->divergence_seq && !r->fire_divergence;
    if (!w.stream_identical) w.divergence = "expected " + r->expected + ", got " + r->got;
    return w;
}

json::object to_json(const what_if_report& r) {
    json::object o{{"label", r.label}, {"predicted", to_json(r.predicted)}};
    o["recorded"] = r.recorded ? json::value(to_json(*r.recorded)) : json::value(nullptr);
    o["engine"] = json::object{{"device_busy_fraction", r.engine.device_busy_fraction},
                               {"kv_peak_fraction", r.engine.kv_peak_fraction},
                               {"preemptions", r.engine.preemptions},
                               {"prefix_cache_hit_rate", r.engine.prefix_cache_hit_rate},
                               {"spec_drafted_tokens", r.engine.drafted},
                               {"spec_accepted_tokens", r.engine.accepted}};
    json::object stream{{"identical", r.stream_identical}, {"messages_compared", r.messages_compared}};
    if (!r.stream_identical) stream["divergence"] = r.divergence;
    o["stream"] = std::move(stream);
    o["time_base"] = json::object{{"predicted", "virtual"}, {"recorded", "daemon steady clock"}};
    return o;
}

std::string render_table(std::span<const what_if_report> reports) {
    char head[320];
    std::snprintf(head, sizeof head, "%-22s %8s %8s %8s %8s %8s %8s %9s %8s  %s\n", "run", "TTFT p50", "p90", "p99",
                  "TPOT p50", "p90", "p99", "out tok/s", "good/s", "device busy, KV peak, preempt, cache hits");
    std::string out = std::string(head) + "(ms; predicted rows are virtual time, the recorded row the daemon's clock)\n";
    if (!reports.empty() && reports.front().recorded) out += row("recorded", *reports.front().recorded, "");
    for (const auto& r : reports) {
        const auto& e = r.engine;
        out += row(r.label, r.predicted,
                   fixed(e.device_busy_fraction, 2) + ", " + fixed(e.kv_peak_fraction, 2) + ", " +
                       std::to_string(e.preemptions) + ", " + fixed(e.prefix_cache_hit_rate, 2) +
                       (e.drafted > 0 ? ", drafts kept " + std::to_string(e.accepted) + "/" + std::to_string(e.drafted)
                                      : std::string()) +
                       (r.stream_identical ? "  [stream identical]" : ""));
    }
    return out;
}

std::string render_requests(const what_if_report& r) {
    std::map<std::string, const request_times*> recorded;
    for (const auto& x : r.recorded_rows) recorded[x.id] = &x;
    std::string out = "request          arrival ms   TTFT pred / rec      TPOT pred / rec      e2e pred / rec   tokens  worst gap\n";
    for (const auto& p : r.predicted_rows) {
        auto it = recorded.find(p.id);
        const request_times* q = it == recorded.end() ? nullptr : it->second;
        auto pair = [&](double a, double b, int d) { return fixed(a, d) + " / " + (q ? fixed(b, d) : std::string("-")); };
        char buf[320];
        std::snprintf(buf, sizeof buf, "%-16s %10s %20s %20s %20s %6lld %10s\n", p.id.c_str(), fixed(p.submit_ms).c_str(),
                      pair(p.ttft_ms, q ? q->ttft_ms : 0, 1).c_str(), pair(p.tpot_ms, q ? q->tpot_ms : 0, 2).c_str(),
                      pair(p.e2e_ms, q ? q->e2e_ms : 0, 1).c_str(), static_cast<long long>(p.output_tokens),
                      fixed(p.max_gap_ms).c_str());
        out += buf;
    }
    return out;
}

}  // namespace calserve::soak
