// Summaries, verdict and report text of the real-daemon soak (see real_soak.hpp).
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <ostream>

#include "soak/real_soak.hpp"

namespace calserve::soak {

std::uint64_t real_soak_report::accounted() const {
    std::uint64_t n = 0;
    for (auto c : outcomes) n += c;
    return n;
}

std::vector<std::string> real_soak_report::failures() const {
    std::vector<std::string> out;
    if (!daemon_answering) out.push_back("the daemon stopped answering");
    if (const auto n = outcomes[static_cast<std::size_t>(request_outcome::unexpected)]; n > 0) {
        out.push_back(std::to_string(n) + " request(s) with an unexpected error");
    }
    if (accounted() != sent) out.push_back("requests not accounted for");
    if (daemon_answering && !settled) out.push_back("KV blocks or in-flight work not back to 0 after the settle");
    if (samples.empty()) out.push_back("no sample taken");
    if (fd.leak) out.push_back("open fds grow with requests");
    if (health_misses > 0) {
        out.push_back("/health did not answer during " + std::to_string(health_misses) +
                      " hostile action(s) (flood, unread stream, SIGHUP)");
    }
    return out;
}

bool real_soak_report::ok() const { return failures().empty(); }

std::vector<std::string> real_soak_report::warnings() const {
    std::vector<std::string> out;
    if (rss.trend.growing) out.push_back("rss grows");
    if (threads.trend.growing) out.push_back("threads grow");
    return out;
}

series_summary summarize(const std::vector<sample_point>& samples, std::size_t from,
                         double (*pick)(const daemon_gauges&), double min_rise) {
    series_summary s;
    if (samples.empty()) return s;
    s.first = pick(samples.front().gauges);
    s.last = pick(samples.back().gauges);
    for (const auto& p : samples) s.max = std::max(s.max, pick(p.gauges));
    std::vector<double> t, v;
    for (std::size_t i = from; i < samples.size(); ++i) {
        t.push_back(samples[i].t_s);
        v.push_back(pick(samples[i].gauges));
    }
    if (auto fit = least_squares(t, v)) {
        s.has_slope = true;
        s.slope_per_hour = fit->slope * 3600.0;
    }
    s.trend = judge_growth(t, v, min_rise);
    return s;
}

namespace {
void print_series(std::ostream& out, const char* name, const series_summary& s, double scale, const char* unit) {
    out << std::fixed << std::setprecision(1) << name << ": first=" << s.first / scale << " last=" << s.last / scale
        << " max=" << s.max / scale << " " << unit;
    if (s.has_slope) out << " slope=" << std::showpos << s.slope_per_hour / scale << std::noshowpos << " " << unit << "/h";
    else out << " slope=n/a (too few samples after warm-up)";
    out << "\n" << std::defaultfloat << std::setprecision(4);
}
}  // namespace

void print_report(const real_soak_report& r, const real_soak_options& o, std::ostream& out) {
    out << "requests: sent=" << r.sent;
    for (std::size_t i = 0; i < request_outcome_count; ++i) {
        out << " " << to_string(static_cast<request_outcome>(i)) << "=" << r.outcomes[i];
    }
    out << " (accounted " << r.accounted() << ")\n";
    for (const auto& [key, n] : r.errors) {
        out << "  error " << key << ": " << n << (r.unexpected.contains(key) ? "  <- unexpected" : "") << "\n";
    }
    for (const auto& [outcome, id] : r.request_ids) out << "  " << to_string(outcome) << ": " << id << "\n";
    if (!o.control_socket.empty()) {
        out << "faults: armed=" << r.arms << " refused=" << r.arms_refused << " deferred=" << r.arms_deferred << " clears=" << r.clears << "\n";
    }
    out << "hostile: floods=" << r.floods << " flood_connections=" << r.flood_connections
        << " never_read=" << r.never_read << " hups=" << r.hups << " health_misses=" << r.health_misses << "\n";
    out << "samples: " << r.samples.size() << " (first " << r.warmup_samples << " in the warm-up, left out of slopes)\n";
    out << std::setprecision(4);
    print_series(out, "rss", r.rss, 1048576.0, "MiB");
    if (!std::isnan(r.heap.last)) print_series(out, "heap", r.heap, 1048576.0, "MiB");
    print_series(out, "fds", r.fds, 1.0, "fds");
    print_series(out, "threads", r.threads, 1.0, "threads");
    if (r.fd.judged) {
        out << "fds per request after warm-up: " << std::showpos << r.fd.fds_per_request << std::noshowpos
            << " (fitted rise " << r.fd.rise_fds << " fds)\n";
    }
    const auto& g = r.final_gauges;
    out << "settle: kv_blocks_used=" << g.kv_blocks_used << " inflight_slots=" << g.inflight_slots
        << " requests_running=" << g.requests_running << " requests_waiting=" << g.requests_waiting << " after "
        << r.settle_s << "s\n";
    const auto fails = r.failures();
    const auto warns = r.warnings();
    if (fails.empty()) {
        out << "verdict: ok (rss " << std::fixed << std::setprecision(1) << std::showpos
            << (r.rss.has_slope ? r.rss.slope_per_hour / 1048576.0 : 0.0)
            << std::noshowpos << std::defaultfloat << " MiB/h, fds " << (r.fd.judged ? "flat per request" : "not judged");
        for (const auto& w : warns) out << "; warning: " << w;
        out << ")\n";
        return;
    }
    out << "verdict: FAIL:";
    for (std::size_t i = 0; i < fails.size(); ++i) out << (i ? "; " : " ") << fails[i];
    for (const auto& w : warns) out << "; warning: " << w;
    out << "\nreproduce: calserve soak --real --url " << o.url << " --seed " << o.seed << " --duration "
        << o.duration_ms << "ms --concurrency " << o.concurrency
        << (o.control_socket.empty() ? "" : " --control-socket " + o.control_socket) << "\n";
}

}  // namespace calserve::soak
