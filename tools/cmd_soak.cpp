// `calserve soak`: the seeded deterministic simulation (soak/soak.hpp).
// Without --model it serves the synthetic tiny-dense model, written once under
// the data home. Exit 0: every invariant held; 1: a violation (the trace is
// written and the reproduce line printed); 2: unusable input.
#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>
#include <spdlog/spdlog.h>

#include "soak/soak.hpp"
#include "tools/command.hpp"
#include "tools/paths.hpp"

namespace calserve::tools {
namespace {
struct soak_cli {
    std::uint64_t seed = 1;
    std::string duration = "60s";
    std::string model;
    std::string trace;
    bool no_reference = false;
    bool verbose = false;
};

int run_soak_cli(const soak_cli& c) {
    soak::soak_options o;
    o.seed = c.seed;
    auto d = soak::parse_duration_ns(c.duration);
    if (!d) {
        std::cerr << "soak: " << d.error().message << "\n";
        return 2;
    }
    o.duration_ns = *d;
    o.trace_path = c.trace;
    o.check_reference = !c.no_reference;
    if (!c.model.empty()) {
        o.model_dir = c.model;
    } else {
        auto tok = tokenizer_dir();
        if (!tok) {
            std::cerr << "soak: " << tok.error().message << "\n";
            return 2;
        }
        o.model_dir = data_home() / "soak-models" / soak::k_soak_model_preset;
        if (auto m = soak::ensure_synthetic_model(o.model_dir, *tok); !m) {
            std::cerr << "soak: synthetic model: " << m.error().message << "\n";
            return 2;
        }
    }
    spdlog::set_level(c.verbose ? spdlog::level::info : spdlog::level::err);  // faults log a lot by design
    auto started = std::chrono::steady_clock::now();
    auto r = soak::run_soak(o, std::cout);
    if (!r) {
        std::cerr << "soak: " << r.error().message << "\n";
        return 2;
    }
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::cout << "soak: wall_s=" << wall << " virtual_s=" << double(r->report.end_ns) / 1e9 << "\n";
    if (!r->report.ok()) {
        std::cout << "reproduce: calserve soak --seed=" << c.seed << " --duration=" << c.duration
                  << (c.model.empty() ? "" : " --model=" + c.model) << "\n";
        return 1;
    }
    std::cout << "soak: ok\n";
    return 0;
}

const bool registered = register_command(
    "soak", "seeded deterministic simulation with traffic, cancels, deadlines and faults", [](CLI::App& app) {
        auto c = std::make_shared<soak_cli>();
        app.add_option("--seed", c->seed, "seed every option and input derives from");
        app.add_option("--duration", c->duration, "virtual traffic time: 500ms, 90s, 15m, 1h, 24h");
        app.add_option("--model", c->model, "Hugging Face model directory (default: synthetic tiny-dense)");
        app.add_option("--trace", c->trace, "record the run's inputs and messages to this JSONL file");
        app.add_flag("--no-reference", c->no_reference, "skip the greedy-vs-reference check (faster)");
        app.add_flag("-v,--verbose", c->verbose, "keep the engine's info logs");
        return [c] { return run_soak_cli(*c); };
    });
}  // namespace
}  // namespace calserve::tools
