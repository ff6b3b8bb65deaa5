// `calserve plan`: per-chip capacity budget of a package at a batch and context.
#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <cstdio>
#include <iostream>
#include <memory>

#include "config/config.hpp"
#include "model/package/capacity.hpp"
#include "tools/command.hpp"

namespace calserve::tools {
namespace {
namespace pkg = calserve::model::package;
namespace json = boost::json;

struct options {
    std::string dir;
    std::uint32_t batch = 1;
    std::uint32_t context = 0;
    std::string kv = "bf16";
    bool json_out = false;
    std::string config;
    std::int64_t guard = -1;  // -1: device.plan.guard_bytes
};

constexpr std::uint32_t k_batches[] = {1, 2, 4, 8, 16};

std::string gib(std::uint64_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(b) / (1ull << 30));
    return buf;
}

json::object to_json(const pkg::package& p, const pkg::capacity_plan& plan, const pkg::capacity_limits& l,
                     pkg::kv_dtype_choice kv) {
    json::array chips, table;
    for (const auto& b : plan.chips)
        chips.push_back(json::object{{"chip", b.chip}, {"params", b.params}, {"kv", b.kv}, {"workspace", b.workspace},
                                     {"io_buffers", b.io_buffers}, {"command_buffers", b.command_buffers},
                                     {"guard", b.guard}, {"total", b.total}, {"usable", b.usable},
                                     {"sram_params", b.sram_params}, {"sram_usable", b.sram_usable}, {"fits", b.fits}});
    for (auto batch : k_batches) {
        const auto fit = pkg::max_context(p, batch, kv, l);
        table.push_back(json::object{{"batch", batch}, {"max_context", fit}, {"usable_context", std::min(fit, p.context)}});
    }
    return {{"package", p.root.string()}, {"batch", plan.batch}, {"context", plan.context},
            {"kv_dtype", pkg::to_string(kv)}, {"fits", plan.fits}, {"chips", std::move(chips)},
            {"max_context_by_batch", std::move(table)}};
}

void print_text(const pkg::package& p, const pkg::capacity_plan& plan, const pkg::capacity_limits& l,
                pkg::kv_dtype_choice kv) {
    std::cout << "package " << p.model_name << " (" << p.topo.chips << " chips, calbin context " << p.context
              << ", batch " << p.batch << ")\nplan: batch " << plan.batch << ", context " << plan.context << ", KV "
              << pkg::to_string(kv) << "\n";
    std::cout << "chip  params  kv  workspace  io  commands  guard  total  usable (GiB)\n";
    for (const auto& b : plan.chips)
        std::cout << b.chip << "  " << gib(b.params) << "  " << gib(b.kv) << "  " << gib(b.workspace) << "  "
                  << gib(b.io_buffers) << "  " << gib(b.command_buffers) << "  " << gib(b.guard) << "  " << gib(b.total)
                  << "  " << gib(b.usable) << (b.fits ? "  fits" : "  DOES NOT FIT") << "\n";
    std::cout << "verdict: " << (plan.fits ? "fits" : "does not fit") << "\nlargest context that fits:\n";
    for (auto batch : k_batches) {
        const auto fit = pkg::max_context(p, batch, kv, l);
        std::cout << "  batch " << batch << ": " << fit << " tokens (usable with this calbin: " << std::min(fit, p.context)
                  << ")\n";
    }
}

int run_plan(const options& o) {
    auto p = pkg::load_package(o.dir);
    if (!p) {
        std::cerr << "plan: " << p.error().what() << "\n";
        return 2;
    }
    std::optional<std::filesystem::path> file;
    if (!o.config.empty()) file = o.config;
    auto cfg = config::load(file);
    if (!cfg) {
        std::cerr << "plan: " << cfg.error().message << "\n";
        return 2;
    }
    pkg::capacity_limits l;
    l.dram_bytes_per_chip = static_cast<std::uint64_t>(cfg->integer("device.sim.dram_bytes_per_chip"));
    l.sram_bytes_per_chip = static_cast<std::uint64_t>(cfg->integer("device.sim.sram_bytes_per_chip"));
    l.guard_bytes = static_cast<std::uint64_t>(o.guard >= 0 ? o.guard : cfg->integer("device.plan.guard_bytes"));
    const auto kv = o.kv == "s8v" ? pkg::kv_dtype_choice::s8v : pkg::kv_dtype_choice::bf16;
    const std::uint32_t context = o.context ? o.context : p->context;
    auto plan = pkg::plan_capacity(*p, o.batch, context, kv, l);
    if (o.json_out) std::cout << json::serialize(to_json(*p, plan, l, kv)) << "\n";
    else print_text(*p, plan, l, kv);
    return plan.fits ? 0 : 1;
}

const bool registered = register_command("plan", "per-chip capacity plan of a package", [](CLI::App& app) {
    auto o = std::make_shared<options>();
    app.add_option("dir", o->dir, "package directory")->required();
    app.add_option("--batch", o->batch, "sequences resident at once")->check(CLI::Range(1u, 4096u));
    app.add_option("--context", o->context, "tokens per sequence (default: the package context)");
    app.add_option("--kv-dtype", o->kv, "bf16 | s8v (BF16 K, S8 V)")->check(CLI::IsMember({"bf16", "s8v"}));
    app.add_flag("--json", o->json_out, "print JSON");
    app.add_option("--config", o->config, "config file for device capacities");
    app.add_option("--guard-bytes", o->guard, "allocator guard per chip (default: device.plan.guard_bytes)");
    return [o] { return run_plan(*o); };
});
}  // namespace
}  // namespace calserve::tools
