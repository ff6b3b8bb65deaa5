#include "loadgen/report.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>

namespace calserve::loadgen {
namespace json = boost::json;

namespace {

double ttft_s(const request_record& r) { return r.t_first_token - r.t_send; }
double e2e_s(const request_record& r) { return r.t_done - r.t_send; }

std::optional<double> tpot_s(const request_record& r) { return request_tpot(e2e_s(r), ttft_s(r), r.completion_tokens); }

std::uint64_t mix(std::uint64_t seed, std::uint64_t k) { return seed ^ (0x9E3779B97F4A7C15ULL * (k + 1)); }

double to_ms(double s) { return s * 1000.0; }

}  // namespace

bool meets_slo(const request_record& r, const slo& s) {
    if (!r.ok) return false;
    if (s.ttft_ms && to_ms(ttft_s(r)) > *s.ttft_ms) return false;
    if (s.tpot_ms) {
        const auto t = tpot_s(r);
        if (t && to_ms(*t) > *s.tpot_ms) return false;
    }
    return true;
}

namespace {

// The window is the sum over rounds of (first measured send .. last measured
// done): with --compare the other server's rounds are not this one's wall time.
void fill_window(std::span<const request_record> records, run_summary& out) {
    std::map<int, std::pair<double, double>> rounds;
    for (const auto& r : records) {
        if (r.warmup || !r.ok) continue;
        auto [it, fresh] = rounds.try_emplace(r.round, r.t_send, r.t_done);
        if (!fresh) {
            it->second.first = std::min(it->second.first, r.t_send);
            it->second.second = std::max(it->second.second, r.t_done);
        }
    }
    double busy = 0.0;
    out.window_s = 0.0;
    for (const auto& [round, w] : rounds) {
        std::vector<span_interval> spans;
        for (const auto& r : records)
            if (r.round == round && r.t_send >= 0 && r.t_done >= r.t_send) spans.push_back({r.t_send, r.t_done});
        const double width = w.second - w.first;
        out.window_s += width;
        busy += mean_concurrency(spans, w.first, w.second) * width;
    }
    const double l = out.window_s > 0 ? busy / out.window_s : 0.0;
    out.littles = littles_law_check(l, out.succeeded, out.window_s, out.e2e_ms.mean / 1000.0);
}

}  // namespace

run_summary summarize_run(std::span<const request_record> records, const slo& s, std::uint64_t seed) {
    run_summary out;
    std::vector<double> ttft, tpot, itl, e2e;
    for (const auto& r : records) {
        if (r.warmup) continue;
        ++out.measured;
        if (!r.ok) {
            ++out.failed;
            continue;
        }
        ++out.succeeded;
        if (meets_slo(r, s)) ++out.met_slo;
        out.output_tokens += r.completion_tokens;
        if (r.server_prompt_tokens >= 0) ++out.prompt_checked;
        if (r.usage_completion) ++out.usage_reported;
        ttft.push_back(to_ms(ttft_s(r)));
        e2e.push_back(to_ms(e2e_s(r)));
        if (auto t = tpot_s(r)) tpot.push_back(to_ms(*t));
        for (double g : inter_token_gaps(r.token_times)) itl.push_back(to_ms(g));
    }
    out.ttft_ms = summarize(ttft, mix(seed, 0));
    out.tpot_ms = summarize(tpot, mix(seed, 1));
    out.itl_ms = summarize(itl, mix(seed, 2));
    out.e2e_ms = summarize(e2e, mix(seed, 3));
    fill_window(records, out);
    if (out.window_s > 0) {
        out.request_throughput = static_cast<double>(out.succeeded) / out.window_s;
        out.token_throughput = static_cast<double>(out.output_tokens) / out.window_s;
        out.goodput = static_cast<double>(out.met_slo) / out.window_s;
    }
    return out;
}

json::object record_json(const request_record& r) {
    json::array tokens;
    for (double t : r.token_times) tokens.push_back(t);
    json::object o{{"index", r.index},
                   {"server", r.server},
                   {"round", r.round},
                   {"warmup", r.warmup},
                   {"ok", r.ok},
                   {"http_status", r.http_status},
                   {"request_id", r.request_id},
                   {"prompt_tokens", r.prompt_tokens},
                   {"max_tokens", r.max_tokens},
                   {"completion_tokens", r.completion_tokens},
                   {"finish_reason", r.finish_reason},
                   {"t_send", r.t_send},
                   {"t_first_byte", r.t_first_byte},
                   {"t_first_token", r.t_first_token},
                   {"t_done", r.t_done},
                   {"token_times", std::move(tokens)}};
    if (r.server_prompt_tokens >= 0) o["server_prompt_tokens"] = r.server_prompt_tokens;
    if (r.cached_tokens >= 0) o["cached_tokens"] = r.cached_tokens;
    if (r.turn > 0) o["turn"] = r.turn;
    if (!r.error.empty()) o["error"] = r.error;
    if (r.join_tried) o["server_joined"] = r.joined.has_value();
    if (r.joined) {
        const auto& t = *r.joined;
        o["server_edge_ttft_s"] = t.edge_ttft_s;
        o["server_edge_e2e_s"] = t.edge_e2e_s;
        o["server_tokenize_s"] = t.tokenize_s;
        o["server_flush_s"] = t.flush_s;
        o["server_queue_s"] = t.queue_s;
        o["server_engine_ttft_s"] = t.engine_ttft_s;
        o["server_engine_e2e_s"] = t.engine_e2e_s;
        if (t.has_device) {
            o["device_s"] = t.device_s;
            o["device_first_s"] = t.device_first_s;
            o["device_wall_s"] = t.device_wall_s;
            o["device_steps"] = t.device_steps;
        }
    }
    return o;
}

namespace {

json::object metric_json(const metric_summary& m) {
    return json::object{{"count", m.count}, {"mean", m.mean},   {"p50", m.p50},
                        {"p90", m.p90},     {"p99", m.p99},     {"mad", m.mad},
                        {"min", m.min},     {"max", m.max},     {"mean_ci95", json::array{m.mean_ci.lo, m.mean_ci.hi}}};
}

std::string row(const char* name, const metric_summary& m) {
    char line[256];
    std::snprintf(line, sizeof line, "%-10s %6zu %9.2f %9.2f %9.2f %9.2f %8.2f  [%.2f, %.2f]\n", name, m.count, m.mean,
                  m.p50, m.p90, m.p99, m.mad, m.mean_ci.lo, m.mean_ci.hi);
    return line;
}

// Whether the server's own counts backed the client's: the prompt lengths are exact
// only where usage.prompt_tokens confirmed them, token counts are chunk counts otherwise.
std::string usage_line(const run_summary& s) {
    if (s.succeeded == 0) return "";
    char line[256];
    if (s.prompt_checked == s.succeeded && s.usage_reported == s.succeeded) {
        std::snprintf(line, sizeof line, "prompt and output token counts confirmed by usage on all %zu requests\n",
                      s.succeeded);
        return line;
    }
    std::snprintf(line, sizeof line,
                  "usage: prompt_tokens checked on %zu of %zu requests, completion_tokens reported on %zu "
                  "(unreported: prompt lengths unchecked, output tokens counted as text chunks)\n",
                  s.prompt_checked, s.succeeded, s.usage_reported);
    return line;
}

}  // namespace

json::object summary_json(const run_summary& s) {
    return json::object{
        {"measured", s.measured},
        {"succeeded", s.succeeded},
        {"failed", s.failed},
        {"met_slo", s.met_slo},
        {"window_s", s.window_s},
        {"output_tokens", s.output_tokens},
        {"prompt_tokens_checked", s.prompt_checked},
        {"usage_reported", s.usage_reported},
        {"request_throughput_rps", s.request_throughput},
        {"token_throughput_tps", s.token_throughput},
        {"goodput_rps", s.goodput},
        {"ttft_ms", metric_json(s.ttft_ms)},
        {"tpot_ms", metric_json(s.tpot_ms)},
        {"itl_ms", metric_json(s.itl_ms)},
        {"e2e_ms", metric_json(s.e2e_ms)},
        {"littles_law", json::object{{"mean_concurrency", s.littles.mean_concurrency},
                                     {"arrival_rate_rps", s.littles.arrival_rate},
                                     {"mean_latency_s", s.littles.mean_latency_s},
                                     {"predicted_concurrency", s.littles.predicted},
                                     {"ratio", s.littles.ratio}}}};
}

std::string turn_table(std::span<const request_record> records, const std::string& title) {
    std::map<int, std::vector<const request_record*>> by_turn;
    for (const auto& r : records)
        if (!r.warmup && r.ok && r.turn > 0) by_turn[r.turn].push_back(&r);
    if (by_turn.empty()) return {};
    std::string out = "== " + title + ": per turn ==\nturn     n  prompt  TTFT p50 (ms)  TTFT mean (ms)  cached tokens (mean)\n";
    for (const auto& [turn, recs] : by_turn) {
        std::vector<double> ttft;
        double cached = 0, prompt = 0;
        for (const auto* r : recs) {
            ttft.push_back(to_ms(ttft_s(*r)));
            cached += double(std::max<std::int64_t>(0, r->cached_tokens));
            prompt += double(r->prompt_tokens);
        }
        std::sort(ttft.begin(), ttft.end());
        const double mean = std::accumulate(ttft.begin(), ttft.end(), 0.0) / double(ttft.size());
        const double p50 = ttft[ttft.size() / 2];
        char line[160];
        std::snprintf(line, sizeof line, "%4d %5zu %7.0f %14.1f %15.1f %21.1f\n", turn, recs.size(),
                      prompt / double(recs.size()), p50, mean, cached / double(recs.size()));
        out += line;
    }
    return out;
}

std::string summary_table(const run_summary& s, const std::string& title) {
    std::string out = "== " + title + " ==\n";
    char line[320];
    std::snprintf(line, sizeof line,
                  "requests %zu measured, %zu ok, %zu failed; window %.3f s; %lld output tokens\n"
                  "throughput %.2f req/s, %.1f tok/s; goodput %.2f req/s (%zu met SLO)\n",
                  s.measured, s.succeeded, s.failed, s.window_s, static_cast<long long>(s.output_tokens),
                  s.request_throughput, s.token_throughput, s.goodput, s.met_slo);
    out += line;
    out += usage_line(s);
    out += "metric (ms)     n      mean       p50       p90       p99      MAD  mean 95% CI\n";
    out += row("TTFT", s.ttft_ms) + row("TPOT", s.tpot_ms) + row("ITL", s.itl_ms) + row("E2E", s.e2e_ms);
    std::snprintf(line, sizeof line, "Little's law: measured L %.3f vs lambda x W %.3f (ratio %.3f)\n",
                  s.littles.mean_concurrency, s.littles.predicted, s.littles.ratio);
    out += line;
    return out;
}

namespace {
double ratio(double b, double a) { return a > 0 ? b / a : 0.0; }
}  // namespace

json::object compare_ratios(const run_summary& a, const run_summary& b) {
    return json::object{{"ttft_mean", ratio(b.ttft_ms.mean, a.ttft_ms.mean)},
                        {"ttft_p99", ratio(b.ttft_ms.p99, a.ttft_ms.p99)},
                        {"tpot_mean", ratio(b.tpot_ms.mean, a.tpot_ms.mean)},
                        {"e2e_mean", ratio(b.e2e_ms.mean, a.e2e_ms.mean)},
                        {"window", ratio(b.window_s, a.window_s)},
                        {"request_throughput", ratio(b.request_throughput, a.request_throughput)},
                        {"token_throughput", ratio(b.token_throughput, a.token_throughput)}};
}

std::string compare_table(const run_summary& a, const run_summary& b) {
    const auto r = compare_ratios(a, b);
    std::string out = "== B / A ratios ==\n";
    for (const auto& [k, v] : r) {
        char line[96];
        std::snprintf(line, sizeof line, "%-20s %8.3f\n", std::string(k).c_str(), v.as_double());
        out += line;
    }
    return out;
}

}  // namespace calserve::loadgen
