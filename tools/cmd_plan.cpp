// `calserve plan`: per-chip capacity budget of a package at a batch and context, per
// decode batch profile the largest context at which that batch fits, and BF16 V against
// S8 V (bytes per token, largest batch at the calbin context, largest context per batch).
#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <cstdio>
#include <iostream>
#include <memory>

#include "config/json_text.hpp"
#include "config/config.hpp"
#include "device/sampling_head.hpp"
#include "model/package/capacity.hpp"
#include "tools/command.hpp"
#include "tools/plan_placement.hpp"

namespace calserve::tools::cmd_plan {
namespace {
namespace pkg = calserve::model::package;
namespace json = boost::json;

struct options {
    std::string dir;
    std::uint32_t batch = 1;
    std::uint32_t context = 0;
    std::string kv;  // empty: what the package stores
    bool json_out = false;
    std::string config;
    std::int64_t guard = -1;  // -1: device.plan.guard_bytes
    placement_cli placement;  // --placement: the placement rows instead (tools/plan_placement.hpp)
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

json::object kv_fit_json(const pkg::kv_dtype_fit& f) {
    json::array contexts;
    for (auto c : f.max_context) contexts.push_back(c);
    return {{"kv_dtype", pkg::to_string(f.kv)}, {"bytes_per_token_per_chip", f.bytes_per_token},
            {"max_batch_at_context", f.max_batch_at_context}, {"max_context_by_batch", std::move(contexts)}};
}

json::object kv_comparison_json(const pkg::kv_comparison& c) {
    json::array batches;
    for (auto b : c.batches) batches.push_back(b);
    return {{"context", c.context}, {"batches", std::move(batches)}, {"bf16", kv_fit_json(c.bf16)},
            {"s8v", kv_fit_json(c.s8v)}};
}

void print_kv_comparison(const pkg::kv_comparison& c) {
    std::cout << "BF16 V vs S8 V (K as the package stores it; S8 V adds one scale per layer, KV head and position):\n"
              << "  KV bytes per token per chip: bf16 " << c.bf16.bytes_per_token << ", s8v " << c.s8v.bytes_per_token
              << " (" << 100.0 * static_cast<double>(c.s8v.bytes_per_token) / static_cast<double>(c.bf16.bytes_per_token)
              << "%)\n  largest batch at the calbin context " << c.context << ": bf16 " << c.bf16.max_batch_at_context
              << ", s8v " << c.s8v.max_batch_at_context << "\n  largest context per batch (bf16 / s8v):";
    for (std::size_t i = 0; i < c.batches.size(); ++i)
        std::cout << "  b" << c.batches[i] << " " << c.bf16.max_context[i] << " / " << c.s8v.max_context[i];
    std::cout << "\n";
}

// A decode profile's output copy per step (every row live) with and without the
// sampling head, and the head's I/O buffers (sample_params and draft_tokens in; sampled,
// rng_state, top-k logits and ids, lse and accepted out; ping and pong).
struct head_figures {
    std::uint64_t logits = 0, drawn = 0, top_k = 0, io = 0;
};
head_figures head_bytes(const pkg::package& p, std::uint64_t batch) {
    namespace dev = calserve::device;
    const auto k = std::int64_t(p.sampling_head_k), vocab = std::int64_t(p.vocab);
    head_figures h;
    h.logits = batch * dev::head_row_d2h_bytes(dev::head_mode::logits, k, vocab);
    h.drawn = batch * dev::head_row_d2h_bytes(dev::head_mode::sample, k, vocab);
    h.top_k = batch * dev::head_row_d2h_bytes(dev::head_mode::top_k, k, vocab);
    h.io = 2 * batch * (std::uint64_t(dev::k_head_row_words) * 4 + 4 + std::uint64_t(dev::k_head_rng_words) * 4 +
                        std::uint64_t(k) * 8 + 8 + std::uint64_t(dev::k_verify_drafts_max) * 4 + 4);
    return h;
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
    for (const auto& f : profile_fits(p, l, kv)) {
        json::object o{{"batch", f.sub->batch}, {"submodel", f.sub->name}, {"max_context", f.max_context},
                       {"usable_context", f.usable_context}, {"kv_tokens_per_row", f.kv_tokens_per_row}};
        const auto h = head_bytes(p, f.sub->batch);
        o["d2h_bytes_logits"] = h.logits;
        if (p.sampling_head_k > 0) {
            o["d2h_bytes_drawn"] = h.drawn;
            o["d2h_bytes_top_k"] = h.top_k;
            o["head_io_bytes"] = h.io;
        }
        profiles.push_back(std::move(o));
    }
    return {{"package", p.root.string()}, {"package_placement", p.placement}, {"batch", plan.batch}, {"context", plan.context},
            {"kv_dtype", pkg::to_string(kv)}, {"fits", plan.fits},
            {"prefix_cache_tokens", cached_beside(p, plan.batch, plan.context)}, {"chips", std::move(chips)},
            {"max_context_by_batch", std::move(table)}, {"decode_profiles", std::move(profiles)},
            {"kv_dtypes", kv_comparison_json(pkg::compare_kv_dtypes(p, k_batches, l))}};
}

void print_text(const pkg::package& p, const pkg::capacity_plan& plan, const pkg::capacity_limits& l,
                pkg::kv_dtype_choice kv) {
    std::cout << "package " << p.model_name << " (" << p.topo.chips << " chips, calbin context " << p.context
              << ", batch " << p.batch << ", placement " << p.placement << ")\nplan: batch " << plan.batch << ", context " << plan.context << ", KV "
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
    if (p.sampling_head_k > 0) {
        std::cout << "sampling head (C3 extension, docs/device.md): top-k " << p.sampling_head_k
                  << "; D2H per step, every row live: logits -> drawn tokens (top-k); head I/O buffers\n";
        for (const auto* m : p.decode_profiles()) {
            const auto h = head_bytes(p, m->batch);
            std::cout << "  b" << m->batch << "  " << h.logits << " B -> " << h.drawn << " B (" << h.top_k << " B); "
                      << h.io << " B\n";
        }
    } else {
        std::cout << "sampling head: none (decode programs return logits only)\n";
    }
    print_kv_comparison(pkg::compare_kv_dtypes(p, k_batches, l));
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
    const auto kv = o.kv.empty()      ? pkg::package_kv_choice(*p)
                    : o.kv == "s8v" ? pkg::kv_dtype_choice::s8v
                                    : pkg::kv_dtype_choice::bf16;
    const std::uint32_t context = o.context ? o.context : p->context;
    if (!o.placement.placement.empty()) return run_plan_placement(*p, *cfg, l, kv, context, o.placement, o.json_out);
    auto plan = pkg::plan_capacity(*p, o.batch, context, kv, l);
    if (o.json_out) std::cout << json_text(to_json(*p, plan, l, kv)) << "\n";
    else print_text(*p, plan, l, kv);
    return plan.fits ? 0 : 1;
}

const bool registered = register_command("plan", "per-chip capacity plan of a package", [](CLI::App& app) {
    auto o = std::make_shared<options>();
    app.add_option("dir", o->dir, "package directory")->required();
    app.add_option("--batch", o->batch, "sequences resident at once")->check(CLI::Range(1u, 4096u));
    app.add_option("--context", o->context, "tokens per sequence (default: the package context)");
    app.add_option("--kv-dtype", o->kv, "bf16 | s8v (S8 V with per-position scales); default: the package's")->check(CLI::IsMember({"bf16", "s8v"}));
    app.add_flag("--json", o->json_out, "print JSON");
    app.add_option("--config", o->config, "config file for device capacities");
    app.add_option("--guard-bytes", o->guard, "allocator guard per chip (default: device.plan.guard_bytes)");
    app.add_option("--placement", o->placement.placement,
                   "tp | ep | pp | all: bytes per chip, link bytes per token, step times and fault domain per placement")
        ->check(CLI::IsMember({"tp", "ep", "pp", "all"}));
    auto* skews = app.add_option("--skews", o->placement.skews, "ep: routing skews (Zipf exponents) to show")->delimiter(',');
    app.add_option("--routing", o->placement.routing,
                   "ep: routing counts JSON recorded by `calserve reference --routing`: the ep row's hot-expert "
                   "imbalance per layer from the counts instead of a skew (skew rows too when --skews is given)");
    app.add_option("--past", o->placement.past, "placement: decode rows' tokens so far")->check(CLI::Range(0, 1 << 24));
    app.add_option("--prompt-tokens", o->placement.prompt_tokens, "placement: prompt length of the prefill time")
        ->check(CLI::Range(1, 1 << 24));
    return [o, skews] {
        o->placement.skews_given = skews->count() > 0;
        return run_plan(*o);
    };
});
}  // namespace
}  // namespace calserve::tools::cmd_plan
