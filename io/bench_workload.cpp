// A bench workload file as a trace (see bench_workload.hpp).
#include "io/bench_workload.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <fstream>
#include <random>

namespace calserve::io {
namespace json = boost::json;
namespace {

double number(const json::object& o, std::string_view key) {
    const auto* v = o.if_contains(key);
    if (!v || !v->is_number()) throw std::invalid_argument("missing number \"" + std::string(key) + "\"");
    return v->to_number<double>();
}

std::int64_t ns(double seconds) { return std::int64_t(std::llround(seconds * 1e9)); }

}  // namespace

bool is_bench_workload(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    return std::getline(in, line) && line.find("\"t_send\"") != std::string::npos &&
           line.find("\"k\":") == std::string::npos;
}

result<trace_file> read_bench_workload(const std::string& path, std::uint64_t seed, std::int64_t vocab) {
    std::ifstream in(path);
    if (!in) return make_error(status::not_found, "workload: cannot open " + path);
    if (vocab <= 0) return make_error(status::invalid_argument, "workload: the package's vocabulary is empty");
    trace_file file;
    file.header.source = "bench";
    std::mt19937_64 rng(seed);
    std::vector<std::pair<trace_submit, trace_done>> rows;
    std::string line;
    for (std::size_t n = 1; std::getline(in, line); ++n) {
        if (line.empty()) continue;
        boost::system::error_code ec;
        auto v = json::parse(line, ec);
        if (ec || !v.is_object()) return make_error(status::invalid_argument, "workload: line " + std::to_string(n) + ": not a JSON object");
        try {
            const auto& o = v.as_object();
            if (!o.contains("ok") || !o.at("ok").as_bool()) continue;  // a failed request: nothing to replay against
            trace_submit s;
            s.t_ns = ns(number(o, "t_send"));
            s.id = "bench-" + std::to_string(std::int64_t(number(o, "index")));
            s.max_tokens = std::int64_t(number(o, "max_tokens"));
            s.prompt.resize(std::size_t(std::max<std::int64_t>(1, std::int64_t(number(o, "prompt_tokens")))));
            for (auto& t : s.prompt) t = std::int32_t(rng() % std::uint64_t(vocab));
            const double first = number(o, "t_first_token"), done = number(o, "t_done");
            trace_done d{ns(done), s.id, json::value_to<std::string>(o.at("finish_reason")),
                         std::int64_t(number(o, "completion_tokens")), first < 0 ? -1 : ns(first) - s.t_ns, ns(done) - s.t_ns, 0};
            rows.emplace_back(std::move(s), std::move(d));
        } catch (const std::exception& e) {
            return make_error(status::invalid_argument, "workload: line " + std::to_string(n) + ": " + e.what());
        }
    }
    if (rows.empty()) return make_error(status::invalid_argument, "workload: no successful request in " + path);
    std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first.t_ns < b.first.t_ns; });
    const std::int64_t t0 = rows.front().first.t_ns;
    for (auto& [s, d] : rows) {
        s.t_ns -= t0;
        d.t_ns -= t0;
        file.inputs.emplace_back(std::move(s));
        file.done.push_back(std::move(d));
    }
    return file;
}

}  // namespace calserve::io
