// The steps of a generation load (generation_steps.hpp).
#include "engine/generation_steps.hpp"

#include "engine/serving_engine.hpp"
#include "device/device.hpp"
#include "model/package/validate.hpp"

namespace calserve::engine::steps {

namespace fs = std::filesystem;
namespace pkg = model::package;

pkg::capacity_limits limits_of(const config& cfg) {
    pkg::capacity_limits l;
    l.dram_bytes_per_chip = std::uint64_t(cfg.integer("device.sim.dram_bytes_per_chip"));
    l.sram_bytes_per_chip = std::uint64_t(cfg.integer("device.sim.sram_bytes_per_chip"));
    l.guard_bytes = std::uint64_t(cfg.integer("device.plan.guard_bytes"));
    return l;
}

std::uint32_t board_chips(const config& cfg) { return std::uint32_t(cfg.integer("device.sim.chips")); }

namespace {
std::string failed_findings(const pkg::validation_report& r) {
    std::string out;
    int n = 0;
    for (const auto& f : r.findings) {
        if (f.level != pkg::severity::error) continue;
        if (n++ < 3) out += (out.empty() ? "" : "; ") + std::string(1, f.gate) + " " + f.code + ": " + f.message;
    }
    if (n > 3) out += "; and " + std::to_string(n - 3) + " more";
    return out;
}
}  // namespace

void_result check_load(const std::string& alias, const fs::path& dir) {
    if (alias.empty()) return make_error(status::invalid_argument, "model load: the alias name is empty");
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        return make_error(status::invalid_argument, "model load: " + dir.string() + " is not a directory");
    if (!fs::exists(dir / "calserve-manifest.json", ec))
        return make_error(status::invalid_argument,
                          "model load: " + dir.string() + " is not a calbin package (generations are packages)");
    return {};
}

result<pkg::package> validate_and_open(const fs::path& dir, const config& cfg) {
    pkg::validate_options vo;
    vo.limits = limits_of(cfg);
    auto report = pkg::validate_package(dir, vo);
    if (!report) return make_error(report.code(), "validation: " + report.error().message);
    if (report->status == "fail") return make_error(status::package_invalid, "validation failed: " + failed_findings(*report));
    auto package = pkg::load_package(dir);
    if (!package) return make_error(package.code(), "package: " + package.error().message);
    return package;
}

pkg::board_placement place_beside(const std::string& alias, const pkg::package& package,
                                  const std::vector<std::uint32_t>& chips, const config& cfg,
                                  const std::vector<std::uint64_t>& resident) {
    pkg::placement_request pr{alias, &package, chips};
    return pkg::place_packages({&pr, 1}, board_chips(cfg), limits_of(cfg), resident);
}

actors::generation_request greedy_request(std::string id, std::vector<actors::token_id> prompt, std::int64_t tokens,
                                  std::chrono::milliseconds timeout) {
    actors::generation_request r;
    r.id = std::move(id);
    r.prompt = std::move(prompt);
    r.sampling.temperature = 0;
    r.max_tokens = tokens;
    r.ignore_eos = true;
    r.timeout = timeout;
    return r;
}

std::optional<error_info> step_failure(const actors::generation_result& r, const std::string& tag) {
    if (r.reason != actors::finish_reason::error && r.reason != actors::finish_reason::timeout) return std::nullopt;
    return error_info{r.failure ? r.failure->code : status::internal,
                      tag + ": " + (r.failure ? r.failure->what() : std::string("request failed"))};
}

result<golden_work> golden_work_of(serving_engine& engine) {
    auto corpus = pkg::read_golden_corpus(engine.dev().package().reference_model_dir / pkg::k_golden_corpus_file);
    if (!corpus) return make_error(status::package_invalid, "golden check: " + corpus.error().message);
    if (auto r = pkg::check_golden_arithmetic(*corpus, engine.dev().info().arithmetic); !r)
        return make_error(status::package_invalid, "golden check: " + r.error().message);
    golden_work w;
    w.corpus = std::move(*corpus);
    for (const auto& c : w.corpus) {
        w.prompts.push_back(c.prompt);
        w.lengths.push_back(std::int64_t(c.tokens.size()));
    }
    return w;
}

result<pkg::golden_verdict> judge_golden(const golden_work& work, const std::vector<std::vector<actors::token_id>>& served) {
    auto verdict = pkg::compare_golden(work.corpus, served);
    if (!verdict.ok) return make_error(status::package_invalid, "golden check: " + verdict.reason);
    return verdict;
}

}  // namespace calserve::engine::steps
