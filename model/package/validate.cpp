// Validator orchestration, status and the validation.json report.
#include "model/package/validate.hpp"

#include <boost/json.hpp>

#include "config/read_file.hpp"
#include "model/package/json_read.hpp"
#include "model/package/manifest.hpp"
#include "model/package/validate_internal.hpp"

namespace calserve::model::package {

namespace json = boost::json;
namespace fs = std::filesystem;

std::string_view to_string(severity s) {
    switch (s) {
        case severity::info: return "info";
        case severity::warning: return "warning";
        case severity::error: return "error";
    }
    return "?";
}

std::size_t validation_report::count(severity s) const {
    return static_cast<std::size_t>(std::count_if(findings.begin(), findings.end(), [&](auto& f) { return f.level == s; }));
}

bool validation_report::has(std::string_view code) const {
    return std::any_of(findings.begin(), findings.end(), [&](auto& f) { return f.code == code; });
}

namespace {

double gib(std::uint64_t b) { return static_cast<double>(b) / static_cast<double>(1ull << 30); }

json::object unions_json(const union_figures& u) {
    return {{"constant_bytes", u.constant},
            {"activation_bytes", u.activation},
            {"input_bytes", u.input},
            {"total_bytes", u.total},
            {"constant_gib", gib(u.constant)},
            {"activation_gib", gib(u.activation)},
            {"input_gib", gib(u.input)},
            {"total_gib", gib(u.total)},
            {"largest_activation_interval", json::object{{"start", to_hex(u.largest_activation_start)},
                                                         {"end", to_hex(u.largest_activation_start +
                                                                        u.largest_activation_interval)},
                                                         {"bytes", u.largest_activation_interval}}}};
}

json::object figures_json(const validation_figures& f) {
    json::array params, d2d;
    for (const auto& p : f.params)
        params.push_back(json::object{{"chip", p.chip}, {"file", p.file}, {"file_bytes", p.file_bytes},
                                      {"dram_bytes", p.dram_bytes}, {"sram_bytes", p.sram_bytes}, {"closes", p.closes}});
    for (std::size_t i = 0; i < f.prefill_d2d.size(); ++i) {
        json::object sizes;
        for (const auto& [size, n] : f.prefill_d2d[i].by_size) sizes[std::to_string(size)] = n;
        d2d.push_back(json::object{{"chip", i}, {"entries", f.prefill_d2d[i].entries}, {"bytes", f.prefill_d2d[i].bytes},
                                   {"gib", gib(f.prefill_d2d[i].bytes)}, {"by_size", std::move(sizes)}});
    }
    json::object unions, families, lines;
    for (const auto& [role, u] : f.unions) unions[role] = unions_json(u);
    for (const auto& [role, chips] : f.op_families) {
        json::array a;
        for (const auto& m : chips) {
            json::object o;
            for (const auto& [k, v] : m) o[k] = v;
            a.push_back(std::move(o));
        }
        families[role] = std::move(a);
    }
    for (const auto& [role, v] : f.profparts_lines) lines[role] = json::value_from(v);
    return {{"files_checked", f.file_count},
            {"parameters", json::object{{"total_bytes", f.param_bytes_total}, {"chips", std::move(params)}}},
            {"kv", json::object{{"bytes_total", f.kv_bytes_total}, {"bytes_per_chip", f.kv_bytes_per_chip}}},
            {"address_unions", std::move(unions)},
            {"prefill_d2d", std::move(d2d)},
            {"op_families", std::move(families)},
            {"profparts_lines", std::move(lines)},
            {"context", json::object{{"package", f.context_package}, {"tokenizer", f.context_tokenizer},
                                     {"model_config", f.context_model}, {"usable", f.context_usable}}}};
}

json::array capacity_json(const std::vector<capacity_plan>& plans) {
    json::array out;
    for (const auto& p : plans) {
        json::array chips;
        for (const auto& b : p.chips)
            chips.push_back(json::object{{"chip", b.chip}, {"params", b.params}, {"kv", b.kv}, {"workspace", b.workspace},
                                         {"io_buffers", b.io_buffers}, {"command_buffers", b.command_buffers},
                                         {"guard", b.guard}, {"total", b.total}, {"usable", b.usable}, {"fits", b.fits}});
        out.push_back(json::object{{"batch", p.batch}, {"context", p.context}, {"kv_dtype", to_string(p.kv)},
                                   {"fits", p.fits}, {"chips", std::move(chips)}});
    }
    return out;
}

void set_status(validation_report& r) {
    r.status = r.count(severity::error) ? "fail" : r.count(severity::warning) ? "pass_with_warnings" : "pass";
}

}  // namespace

std::string validation_report::to_json() const {
    json::array list;
    for (const auto& f : findings)
        list.push_back(json::object{{"code", f.code}, {"severity", to_string(f.level)}, {"gate", std::string(1, f.gate)},
                                    {"file", f.file}, {"message", f.message}});
    json::object doc{{"schema", "calserve-validation/1"},
                     {"package", dir.string()},
                     {"status", status},
                     {"counts", json::object{{"error", count(severity::error)}, {"warning", count(severity::warning)},
                                             {"info", count(severity::info)}}},
                     {"findings", std::move(list)},
                     {"figures", figures_json(figures)},
                     {"capacity", capacity_json(capacity)}};
    return json::serialize(doc) + "\n";
}

result<validation_report> validate_package(const fs::path& dir, const validate_options& o) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return make_error(status::not_found, "package directory not found: " + dir.string());
    auto text = read_text_file(dir / k_manifest_file, 64ull << 20);
    if (!text) return make_error(status::not_found, "no " + std::string(k_manifest_file) + " in " + dir.string());
    validation_report report;
    report.dir = fs::absolute(dir, ec);
    auto pkg = parse_manifest(text.value(), report.dir);
    if (!pkg) {
        report.findings.push_back({"A_MANIFEST_INVALID", severity::error, 'A', std::string(k_manifest_file),
                                   pkg.error().message});
        set_status(report);
        return report;
    }
    validation_context c;
    c.root = report.dir;
    c.opt = o;
    c.pkg = std::move(pkg.value());
    c.report = &report;
    c.layout = expected_layout(c.pkg);
    gate_inventory(c);
    gate_grammar(c);
    gate_cross(c);
    compute_figures(c);
    gate_semantics(c);
    gate_capacity(c);
    gate_reproducibility(c);
    set_status(report);
    return report;
}

}  // namespace calserve::model::package
