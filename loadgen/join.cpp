#include "loadgen/join.hpp"

#include <boost/json.hpp>
#include <cstdio>

namespace calserve::loadgen {
namespace json = boost::json;

namespace {

double number(const json::object& o, std::string_view key, double fallback) {
    const auto* v = o.if_contains(key);
    if (v == nullptr) return fallback;
    if (v->is_double()) return v->get_double();
    if (v->is_int64()) return static_cast<double>(v->get_int64());
    if (v->is_uint64()) return static_cast<double>(v->get_uint64());
    return fallback;
}

server_timing from_line(const json::object& o) {
    server_timing t;
    t.edge_ttft_s = number(o, "ttft_s", -1);
    t.edge_e2e_s = number(o, "e2e_s", 0);
    t.tokenize_s = number(o, "tokenize_s", 0);
    t.flush_s = number(o, "flush_s", 0);
    t.queue_s = number(o, "queue_s", 0);
    t.engine_ttft_s = number(o, "server_ttft_s", 0);
    t.engine_e2e_s = number(o, "server_e2e_s", 0);
    t.has_device = o.contains("device_s") && o.contains("device_steps");
    t.device_s = number(o, "device_s", 0);
    t.device_first_s = number(o, "device_first_s", 0);
    t.device_wall_s = number(o, "device_wall_s", 0);
    t.device_steps = static_cast<std::int64_t>(number(o, "device_steps", 0));
    t.completion_tokens = static_cast<std::int64_t>(number(o, "completion_tokens", 0));
    return t;
}

}  // namespace

timing_index parse_timing_log(std::string_view text) {
    timing_index idx;
    while (!text.empty()) {
        const auto nl = text.find('\n');
        auto line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
        if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
        ++idx.lines;
        boost::system::error_code ec;
        const auto v = json::parse(line, ec);
        const auto* id = (!ec && v.is_object()) ? v.get_object().if_contains("id") : nullptr;
        if (id == nullptr || !id->is_string() || id->get_string().empty()) {
            ++idx.malformed;
            continue;
        }
        idx.by_id[std::string(id->get_string())] = from_line(v.get_object());
    }
    return idx;
}

join_stats join_timing(std::span<request_record> records, const timing_index& log) {
    join_stats s;
    for (auto& r : records) {
        r.join_tried = true;
        r.joined.reset();
        if (r.request_id.empty()) {
            ++s.no_id;
            continue;
        }
        const auto it = log.by_id.find(r.request_id);
        if (it == log.by_id.end()) {
            ++s.unjoined;
            continue;
        }
        r.joined = it->second;
        ++s.joined;
    }
    return s;
}

namespace {

double ms(double s) { return s * 1000.0; }

struct clock_samples {
    std::vector<double> client_ttft, edge_ttft, engine_ttft, device_first;
    std::vector<double> client_e2e, edge_e2e, engine_e2e, device;
    std::vector<double> overhead, host_step, device_step, job_wall_step, outside_step;

    void add(const request_record& r, const server_timing& t, bool& has_device) {
        const double client_e2e_s = r.t_done - r.t_send;
        client_ttft.push_back(ms(r.t_first_token - r.t_send));
        if (t.edge_ttft_s >= 0) edge_ttft.push_back(ms(t.edge_ttft_s));
        engine_ttft.push_back(ms(t.engine_ttft_s));
        client_e2e.push_back(ms(client_e2e_s));
        edge_e2e.push_back(ms(t.edge_e2e_s));
        engine_e2e.push_back(ms(t.engine_e2e_s));
        overhead.push_back(ms(client_e2e_s - t.engine_e2e_s));
        if (!t.has_device) return;
        has_device = true;
        device_first.push_back(ms(t.device_first_s));
        device.push_back(ms(t.device_s));
        if (t.device_steps > 0) {
            const auto steps = static_cast<double>(t.device_steps);
            host_step.push_back(ms(t.engine_e2e_s - t.device_s) / steps);
            device_step.push_back(ms(t.device_s) / steps);
            job_wall_step.push_back(ms(t.device_wall_s) / steps);
            outside_step.push_back(ms(t.engine_e2e_s - t.device_wall_s) / steps);
        }
    }
};

std::uint64_t mix(std::uint64_t seed, std::uint64_t k) { return seed ^ (0xD1B54A32D192ED03ULL * (k + 11)); }

}  // namespace

clocks_summary summarize_clocks(std::span<const request_record> records, std::uint64_t seed) {
    clocks_summary c;
    clock_samples x;
    for (const auto& r : records) {
        if (r.warmup) continue;
        if (r.request_id.empty()) ++c.join.no_id;
        else if (r.joined) ++c.join.joined;
        else ++c.join.unjoined;
        if (r.ok && r.joined) x.add(r, *r.joined, c.has_device);
    }
    std::uint64_t k = 0;
    for (auto [out, in] : {std::pair{&c.client_ttft_ms, &x.client_ttft}, {&c.edge_ttft_ms, &x.edge_ttft},
                           {&c.engine_ttft_ms, &x.engine_ttft}, {&c.device_first_ms, &x.device_first},
                           {&c.client_e2e_ms, &x.client_e2e}, {&c.edge_e2e_ms, &x.edge_e2e},
                           {&c.engine_e2e_ms, &x.engine_e2e}, {&c.device_ms, &x.device},
                           {&c.overhead_ms, &x.overhead}, {&c.host_step_ms, &x.host_step},
                           {&c.device_step_ms, &x.device_step}, {&c.job_wall_step_ms, &x.job_wall_step},
                           {&c.outside_step_ms, &x.outside_step}})
        *out = summarize(*in, mix(seed, k++));
    return c;
}

namespace {

struct named_metric {
    const char* key;
    const char* label;
    const metric_summary clocks_summary::*field;
};

constexpr named_metric k_rows[] = {
    {"client_ttft_ms", "TTFT client", &clocks_summary::client_ttft_ms},
    {"edge_ttft_ms", "TTFT server edge", &clocks_summary::edge_ttft_ms},
    {"engine_ttft_ms", "TTFT server engine", &clocks_summary::engine_ttft_ms},
    {"device_first_ms", "TTFT device", &clocks_summary::device_first_ms},
    {"client_e2e_ms", "E2E client", &clocks_summary::client_e2e_ms},
    {"edge_e2e_ms", "E2E server edge", &clocks_summary::edge_e2e_ms},
    {"engine_e2e_ms", "E2E server engine", &clocks_summary::engine_e2e_ms},
    {"device_ms", "E2E device", &clocks_summary::device_ms},
    {"overhead_ms", "net+stream (client-engine)", &clocks_summary::overhead_ms},
    {"host_step_ms", "host per step", &clocks_summary::host_step_ms},
    {"device_step_ms", "device per step", &clocks_summary::device_step_ms},
    {"job_wall_step_ms", "job wall per step", &clocks_summary::job_wall_step_ms},
    {"outside_step_ms", "outside jobs per step", &clocks_summary::outside_step_ms},
};

}  // namespace

json::object clocks_json(const clocks_summary& c) {
    json::object o{{"joined", c.join.joined},
                   {"unjoined", c.join.unjoined},
                   {"no_id", c.join.no_id},
                   {"has_device", c.has_device}};
    for (const auto& row : k_rows) {
        const auto& m = c.*row.field;
        o[row.key] = json::object{{"count", m.count}, {"mean", m.mean}, {"p50", m.p50},
                                  {"p90", m.p90},     {"p99", m.p99},   {"mean_ci95", json::array{m.mean_ci.lo, m.mean_ci.hi}}};
    }
    return o;
}

std::string clocks_table(const clocks_summary& c, const std::string& title) {
    std::string out = "== three clocks: " + title + " ==\n";
    char line[256];
    std::snprintf(line, sizeof line, "server log: %zu joined, %zu unjoined (id not in the log), %zu without id\n",
                  c.join.joined, c.join.unjoined, c.join.no_id);
    out += line;
    out += "metric (ms)                    n       p50       p99      mean\n";
    for (const auto& row : k_rows) {
        const auto& m = c.*row.field;
        if (m.count == 0) continue;
        std::snprintf(line, sizeof line, "%-26s %6zu %9.3f %9.3f %9.3f\n", row.label, m.count, m.p50, m.p99, m.mean);
        out += line;
    }
    if (!c.has_device) out += "(the server log carries no device clock)\n";
    return out;
}

}  // namespace calserve::loadgen
