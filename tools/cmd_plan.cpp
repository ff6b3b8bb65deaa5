// `calserve plan`: per-chip capacity budget of a package at a batch and context, and per
// decode batch profile the largest context at which that batch fits.
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

// Tokens of cached (finished) sequences the package's KV region keeps beside `rows`
// running sequences of `context` tokens each (the prefix cache's room: docs/device.md,
// "KV sequence operations"; a hit copies them with seq copy).
std::uint64_t cached_beside(const pkg::package& p, std::uint64_t rows, std::uint64_t context) {
    const std::uint64_t region = std::uint64_t{p.kv.context} * p.kv.batch;
    return region > rows * context ? region - rows * context : 0;
}

std::string gib(std::uint64_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(b) / (1ull << 30));
    return buf;
}

// One decode batch profile: the largest context at which its batch fits the device, and the
// tokens per row the package's own KV region gives when every row is busy.
struct profile_fit {
    const pkg::submodel* sub = nullptr;
    std::uint32_t max_context = 0;     // capacity planner, not capped
    std::uint32_t usable_context = 0;  // capped by the calbin context
    std::uint64_t kv_tokens_per_row = 0;
};

std::vector<profile_fit> profile_fits(const pkg::package& p, const pkg::capacity_limits& l, pkg::kv_dtype_choice kv) {
    std::vector<profile_fit> out;
    const std::uint64_t kv_tokens = std::uint64_t{p.kv.context} * p.kv.batch;
    for (const auto* m : p.decode_profiles()) {
        const auto fit = pkg::max_context(p, m->batch, kv, l);
        out.push_back({m, fit, std::min(fit, p.context), std::min<std::uint64_t>(kv_tokens / m->batch, p.context)});
    }
    return out;
}

json::object to_json(const pkg::package& p, const pkg::capacity_plan& plan, const pkg::capacity_limits& l,
                     pkg::kv_dtype_choice kv) {
    json::array chips, table, profiles;
    for (const auto& b : plan.chips)
        chips.push_back(json::object{{"chip", b.chip}, {"params", b.params}, {"kv", b.kv}, {"workspace", b.workspace},
                                     {"io_buffers", b.io_buffers}, {"command_buffers", b.command_buffers},
                                     {"guard", b.guard}, {"total", b.total}, {"usable", b.usable},
                                     {"sram_params", b.sram_params}, {"sram_usable", b.sram_usable}, {"fits", b.fits}});
    for (auto batch : k_batches) {
        const auto fit = pkg::max_context(p, batch, kv, l);
        table.push_back(json::object{{"batch", batch}, {"max_context", fit}, {"usable_context", std::min(fit, p.context)}});
    }
    for (const auto& f : profile_fits(p, l, kv))
        profiles.push_back(json::object{{"batch", f.sub->batch}, {"submodel", f.sub->name}, {"max_context", f.max_context},
                                        {"usable_context", f.usable_context}, {"kv_tokens_per_row", f.kv_tokens_per_row}});
    return {{"package", p.root.string()}, {"batch", plan.batch}, {"context", plan.context},
            {"kv_dtype", pkg::to_string(kv)}, {"fits", plan.fits},
            {"prefix_cache_tokens", cached_beside(p, plan.batch, plan.context)}, {"chips", std::move(chips)},
            {"max_context_by_batch", std::move(table)}, {"decode_profiles", std::move(profiles)}};
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
    std::cout << "prefix cache (seq copy / seq keep): the KV region keeps " << cached_beside(p, plan.batch, plan.context)
              << " cached tokens beside " << plan.batch << " running sequences of " << plan.context << " tokens\n";
    std::cout << "decode profiles (largest context at which the batch fits; the package's KV region of " << p.kv.batch
              << " x " << p.kv.context << " tokens shared by busy rows):\n";
    for (const auto& f : profile_fits(p, l, kv))
        std::cout << "  b" << f.sub->batch << "  " << f.sub->name << ": fits up to " << f.max_context
                  << " tokens per row (usable with this calbin: " << f.usable_context << "); KV region gives "
                  << f.kv_tokens_per_row << " per row\n";
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
