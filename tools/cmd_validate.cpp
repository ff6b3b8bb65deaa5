// `calserve validate`: static package validation (gates A-F), validation.json.
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <memory>

#include "config/config.hpp"
#include "model/package/validate.hpp"
#include "tools/command.hpp"

namespace calserve::tools::cmd_validate {
namespace {
namespace pkg = calserve::model::package;

struct options {
    std::string dir;
    bool full_hash = false;
    std::string output;
    std::string config;
    bool quiet = false;
};

int run_validate(const options& o) {
    std::optional<std::filesystem::path> file;
    if (!o.config.empty()) file = o.config;
    auto cfg = config::load(file);
    if (!cfg) {
        std::cerr << "validate: " << cfg.error().message << "\n";
        return 2;
    }
    pkg::validate_options vo;
    vo.full_hash = o.full_hash;
    vo.limits.dram_bytes_per_chip = static_cast<std::uint64_t>(cfg->integer("device.sim.dram_bytes_per_chip"));
    vo.limits.sram_bytes_per_chip = static_cast<std::uint64_t>(cfg->integer("device.sim.sram_bytes_per_chip"));
    vo.limits.guard_bytes = static_cast<std::uint64_t>(cfg->integer("device.plan.guard_bytes"));
    auto r = pkg::validate_package(o.dir, vo);
    if (!r) {
        std::cerr << "validate: " << r.error().what() << "\n";
        return 2;
    }
    if (!o.output.empty()) {
        std::ofstream out(o.output);
        out << r->to_json();
        if (!out) {
            std::cerr << "validate: cannot write " << o.output << "\n";
            return 2;
        }
    }
    if (!o.quiet)
        for (const auto& f : r->findings)
            std::cout << pkg::to_string(f.level) << " " << f.gate << " " << f.code << (f.file.empty() ? "" : " " + f.file)
                      << ": " << f.message << "\n";
    std::cout << "status: " << r->status << " (" << r->count(pkg::severity::error) << " errors, "
              << r->count(pkg::severity::warning) << " warnings, " << r->count(pkg::severity::info) << " info)\n";
    return r->status == "fail" ? 1 : 0;
}

const bool registered = register_command("validate", "validate a calbin package (gates A-F)", [](CLI::App& app) {
    auto o = std::make_shared<options>();
    app.add_option("dir", o->dir, "package directory")->required();
    app.add_flag("--full-hash", o->full_hash, "hash multi-GiB parameter blocks completely");
    app.add_option("--output", o->output, "write the JSON report (validation.json) here");
    app.add_option("--config", o->config, "config file for device capacities");
    app.add_flag("-q,--quiet", o->quiet, "print only the status line");
    return [o] { return run_validate(*o); };
});
}  // namespace
}  // namespace calserve::tools::cmd_validate
