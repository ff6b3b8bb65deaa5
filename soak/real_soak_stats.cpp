// Pure rules of the real-daemon soak (see real_soak_stats.hpp).
#include "soak/real_soak_stats.hpp"

#include <charconv>
#include <cmath>

namespace calserve::soak {

std::optional<double> find_sample(std::string_view page, std::string_view name) {
    std::size_t pos = 0;
    while (pos < page.size()) {
        auto eol = page.find('\n', pos);
        if (eol == std::string_view::npos) eol = page.size();
        auto line = page.substr(pos, eol - pos);
        pos = eol + 1;
        if (line.size() <= name.size() || !line.starts_with(name) || line[name.size()] != ' ') continue;
        auto text = line.substr(name.size() + 1);
        double v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec == std::errc{}) return v;
    }
    return std::nullopt;
}

std::optional<daemon_gauges> parse_gauges(std::string_view page) {
    auto rss = find_sample(page, "process_resident_memory_bytes");
    auto fds = find_sample(page, "process_open_fds");
    auto threads = find_sample(page, "process_threads");
    auto kv = find_sample(page, "calserve_kv_blocks_used");
    auto slots = find_sample(page, "calserve_inflight_slots");
    if (!rss || !fds || !threads || !kv || !slots) return std::nullopt;
    daemon_gauges g;
    g.rss_bytes = *rss;
    g.open_fds = *fds;
    g.threads = *threads;
    g.cpu_seconds = find_sample(page, "process_cpu_seconds_total").value_or(NAN);
    g.heap_bytes = find_sample(page, "process_heap_bytes").value_or(NAN);
    g.kv_blocks_used = *kv;
    g.inflight_slots = *slots;
    g.requests_running = find_sample(page, "calserve_requests_running").value_or(NAN);
    g.requests_waiting = find_sample(page, "calserve_requests_waiting").value_or(NAN);
    return g;
}

std::string_view to_string(request_outcome o) {
    static constexpr std::string_view names[request_outcome_count] = {"completed", "deadline",          "disconnected",
                                                                      "shed",      "fault",             "retries_exhausted",
                                                                      "unexpected"};
    return names[static_cast<std::size_t>(o)];
}

namespace {
// Codes of config/status.hpp by fault class, as the API reports them.
bool is_shedding(std::string_view code) {
    return code == "kv_full" || code == "overloaded" || code == "queue_full" || code == "submit_busy" ||
           code == "mailbox_full";
}
bool is_recoverable_device(std::string_view code) {
    return code == "wait_timeout" || code == "ccu_exception" || code == "device_lost" || code == "h2d_error" ||
           code == "d2h_error" || code == "logits_nan" || code == "submit_error" || code == "not_ready";
}
}  // namespace

request_outcome classify(const seen_end& e) {
    if (e.closed_by_client) return request_outcome::disconnected;
    if (e.finished && e.error_code.empty()) return request_outcome::completed;
    const auto& code = e.error_code;
    if (code == "deadline_exceeded" || (code.empty() && e.http_status == 504)) {
        return e.set_deadline ? request_outcome::deadline : request_outcome::unexpected;
    }
    if (is_shedding(code) && (e.http_status == 200 || e.http_status == 429 || e.http_status == 503)) {
        return request_outcome::shed;
    }
    if (is_recoverable_device(code) && e.faults_armed && (e.http_status == 200 || e.http_status == 503)) {
        return request_outcome::fault;
    }
    if (code == "job_retries_exhausted" && e.faults_armed && (e.http_status == 200 || e.http_status == 503)) {
        return request_outcome::retries_exhausted;
    }
    return request_outcome::unexpected;
}

std::optional<line_fit> least_squares(std::span<const double> x, std::span<const double> y) {
    const std::size_t n = std::min(x.size(), y.size());
    if (n < 2) return std::nullopt;
    double mx = 0, my = 0;
    for (std::size_t i = 0; i < n; ++i) mx += x[i], my += y[i];
    mx /= double(n);
    my /= double(n);
    double sxx = 0, sxy = 0;
    for (std::size_t i = 0; i < n; ++i) {
        sxx += (x[i] - mx) * (x[i] - mx);
        sxy += (x[i] - mx) * (y[i] - my);
    }
    if (sxx <= 0) return std::nullopt;
    line_fit f;
    f.slope = sxy / sxx;
    f.intercept = my - f.slope * mx;
    f.points = n;
    return f;
}

fd_verdict judge_fds(std::span<const double> requests_done, std::span<const double> open_fds,
                     const fd_leak_rule& rule) {
    fd_verdict v;
    const auto fit = least_squares(requests_done, open_fds);
    if (!fit || fit->points < rule.min_points) return v;
    v.judged = true;
    v.fds_per_request = fit->slope;
    const double span = requests_done[fit->points - 1] - requests_done[0];
    v.rise_fds = fit->slope * span;
    v.leak = fit->slope > rule.max_fds_per_request && v.rise_fds > rule.noise_fds;
    return v;
}

growth judge_growth(std::span<const double> t, std::span<const double> v, double min_rise,
                    std::size_t min_points) {
    growth g;
    const auto fit = least_squares(t, v);
    if (!fit || fit->points < min_points) return g;
    g.judged = true;
    g.rise = fit->slope * (t[fit->points - 1] - t[0]);
    g.growing = g.rise > min_rise;
    return g;
}

}  // namespace calserve::soak
