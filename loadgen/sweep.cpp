#include "loadgen/sweep.hpp"

#include <boost/json.hpp>
#include <cmath>
#include <cstdio>
#include <set>

namespace calserve::loadgen {
namespace json = boost::json;

std::string_view to_string(sweep_axis a) {
    switch (a) {
        case sweep_axis::concurrency: return "concurrency";
        case sweep_axis::prompt_tokens: return "prompt-tokens";
        case sweep_axis::output_tokens: return "output-tokens";
        case sweep_axis::rate: return "rate";
    }
    return "?";
}

namespace {

constexpr std::size_t k_max_cells = 64;

std::optional<sweep_axis> axis_of(std::string_view name) {
    for (auto a : {sweep_axis::concurrency, sweep_axis::prompt_tokens, sweep_axis::output_tokens, sweep_axis::rate})
        if (to_string(a) == name) return a;
    return std::nullopt;
}

std::optional<double> parse_rate(std::string_view t) {
    if (t.empty() || t.size() > 24 || t.find_first_not_of("0123456789.") != std::string_view::npos) return std::nullopt;
    char* end = nullptr;
    const std::string s(t);
    const double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size() || !std::isfinite(v) || v <= 0) return std::nullopt;
    return v;
}

std::optional<double> parse_value(sweep_axis axis, std::string_view t) {
    switch (axis) {
        case sweep_axis::rate: return parse_rate(t);
        case sweep_axis::prompt_tokens:
            if (auto v = parse_token_count(t)) return static_cast<double>(*v);
            return std::nullopt;
        case sweep_axis::concurrency:
        case sweep_axis::output_tokens: {
            if (t.empty() || t.size() > 7 || t.find_first_not_of("0123456789") != std::string_view::npos)
                return std::nullopt;
            const double v = std::stod(std::string(t));
            if (v < 1 || (axis == sweep_axis::concurrency && v > 4096)) return std::nullopt;
            return v;
        }
    }
    return std::nullopt;
}

const char* expected(sweep_axis axis) {
    switch (axis) {
        case sweep_axis::concurrency: return "an integer 1..4096";
        case sweep_axis::prompt_tokens: return "a token count like 256 or 1K";
        case sweep_axis::output_tokens: return "a positive integer";
        case sweep_axis::rate: return "requests/s > 0, like 0.5";
    }
    return "?";
}

}  // namespace

result<sweep_spec> parse_sweep(std::string_view text) {
    const auto eq = text.find('=');
    if (eq == std::string_view::npos)
        return make_error(status::invalid_argument,
                          "--sweep: expected AXIS=V1,V2,... with AXIS one of concurrency, prompt-tokens, "
                          "output-tokens, rate");
    const auto axis = axis_of(text.substr(0, eq));
    if (!axis)
        return make_error(status::invalid_argument, "--sweep: unknown axis '" + std::string(text.substr(0, eq)) +
                                                        "' (concurrency, prompt-tokens, output-tokens, rate)");
    sweep_spec spec{*axis, {}};
    auto rest = text.substr(eq + 1);
    std::set<std::string> names;
    while (true) {
        const auto comma = rest.find(',');
        const auto item = rest.substr(0, comma);
        const auto v = parse_value(*axis, item);
        if (!v)
            return make_error(status::invalid_argument, "--sweep " + std::string(to_string(*axis)) + ": '" +
                                                            std::string(item) + "' is not " + expected(*axis));
        if (!names.insert(cell_name(*axis, *v)).second)
            return make_error(status::invalid_argument, "--sweep: value '" + std::string(item) + "' given twice");
        spec.values.push_back(*v);
        if (spec.values.size() > k_max_cells)
            return make_error(status::invalid_argument, "--sweep: more than " + std::to_string(k_max_cells) + " cells");
        if (comma == std::string_view::npos) break;
        rest = rest.substr(comma + 1);
    }
    return spec;
}

std::string cell_name(sweep_axis axis, double value) {
    char buf[64];
    if (axis == sweep_axis::rate) std::snprintf(buf, sizeof buf, "%s-%g", std::string(to_string(axis)).c_str(), value);
    else std::snprintf(buf, sizeof buf, "%s-%lld", std::string(to_string(axis)).c_str(), static_cast<long long>(value));
    return buf;
}

run_options cell_options(const run_options& base, sweep_axis axis, double value, arrival_kind open_kind) {
    run_options o = base;
    switch (axis) {
        case sweep_axis::concurrency:
            o.arrival = arrival_kind::closed;
            o.concurrency = static_cast<int>(value);
            break;
        case sweep_axis::rate:
            o.arrival = open_kind == arrival_kind::closed ? arrival_kind::poisson : open_kind;
            o.rate = value;
            break;
        case sweep_axis::prompt_tokens: o.prompt_tokens = static_cast<std::int64_t>(value); break;
        case sweep_axis::output_tokens: o.output_tokens = static_cast<std::int64_t>(value); break;
    }
    return o;
}

bool fits_context(std::int64_t prompt_tokens, std::int64_t output_tokens, std::int64_t context) {
    return context <= 0 || prompt_tokens + output_tokens <= context;
}

json::object sweep_json(const sweep_spec& spec, const std::vector<sweep_row>& rows,
                        const std::vector<std::string>& skipped) {
    json::array cells;
    for (const auto& r : rows)
        cells.push_back(json::object{{"cell", r.cell},
                                     {"value", r.value},
                                     {"server", r.server},
                                     {"dir", r.cell},
                                     {"summary", summary_json(r.summary)}});
    json::array skip;
    for (const auto& s : skipped) skip.push_back(json::string(s));
    return json::object{{"axis", to_string(spec.axis)}, {"cells", std::move(cells)}, {"skipped", std::move(skip)}};
}

std::string sweep_table(const sweep_spec& spec, const std::vector<sweep_row>& rows,
                        const std::vector<std::string>& skipped) {
    std::string out = "== sweep over " + std::string(to_string(spec.axis)) + " ==\n";
    out += "cell                   srv    ok fail  TTFT p50   TTFT p99  TPOT p50  TPOT p99    req/s    tok/s  goodput\n";
    char line[320];
    for (const auto& r : rows) {
        const auto& s = r.summary;
        std::snprintf(line, sizeof line, "%-22s %-3s %5zu %4zu %9.2f %10.2f %9.3f %9.3f %8.2f %8.1f %8.2f\n",
                      r.cell.c_str(), r.server.c_str(), s.succeeded, s.failed, s.ttft_ms.p50, s.ttft_ms.p99,
                      s.tpot_ms.p50, s.tpot_ms.p99, s.request_throughput, s.token_throughput, s.goodput);
        out += line;
    }
    for (const auto& s : skipped) out += "skipped: " + s + "\n";
    return out;
}

}  // namespace calserve::loadgen
