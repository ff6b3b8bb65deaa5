// `calserve soak`: the seeded deterministic simulation (soak/soak.hpp).
// Without --model or --package it serves the synthetic micro-dense model (cpu
// backend), written once under the data home; --package soaks the simulated NPU
// with its latency model. Exit 0: every invariant held; 1: a violation (the trace is
// written and the reproduce line printed); 2: unusable input. `--seeds A..B` runs
// every seed in turn and lists the failures (exit 1 if any).
// `calserve soak --real --url URL`: wall-clock load with faults against a live
// daemon (soak/real_soak.hpp). Exit 0: verdict ok; 1: a failure (unexpected
// errors, daemon gone, KV not released, fd leak); 2: unusable input or daemon
// unreachable at the start.
#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>
#include <optional>
#include <sstream>
#include <vector>
#include <spdlog/spdlog.h>

#include "soak/real_soak.hpp"
#include "soak/soak.hpp"
#include "tools/command.hpp"
#include "tools/data_paths.hpp"

namespace calserve::tools::cmd_soak {
namespace {
struct soak_cli {
    std::uint64_t seed = 1;
    std::string seeds;  // "A..B": a sweep
    std::string duration = "60s";
    std::string model;
    std::string package;
    std::string trace;
    bool no_reference = false;
    bool generations = false;
    bool verbose = false;
    // --real
    bool real = false;
    std::string url;
    std::string control_socket;
    int concurrency = 4;
    std::string sample_interval = "1s";
    std::string warmup = "20%";
    std::string out;
    int daemon_pid = 0;
};

// "20%" or "0.2" -> 0.2.
std::optional<double> parse_share(const std::string& text) {
    try {
        std::size_t used = 0;
        double v = std::stod(text, &used);
        if (used < text.size() && text.substr(used) == "%") v /= 100.0;
        else if (used != text.size()) return std::nullopt;
        if (v < 0 || v >= 1) return std::nullopt;
        return v;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

int run_real_soak_cli(const soak_cli& c) {
    if (c.url.empty()) {
        std::cerr << "soak --real: --url http://host:port is required\n";
        return 2;
    }
    soak::real_soak_options o;
    o.url = c.url;
    o.control_socket = c.control_socket;
    o.seed = c.seed;
    o.concurrency = c.concurrency;
    o.out_path = c.out;
    o.daemon_pid = c.daemon_pid;
    auto d = soak::parse_duration_ns(c.duration);
    auto i = soak::parse_duration_ns(c.sample_interval);
    auto w = parse_share(c.warmup);
    if (!d || !i || !w || c.concurrency < 1 || *d < 1'000'000 || *i < 1'000'000) {
        std::cerr << "soak --real: need --duration and --sample-interval >= 1ms, --concurrency >= 1, "
                     "--warmup in [0%, 100%)\n";
        return 2;
    }
    o.duration_ms = *d / 1'000'000;
    o.sample_interval_ms = *i / 1'000'000;
    o.warmup_share = *w;
    auto r = soak::run_real_soak(o, std::cout);
    if (!r) {
        std::cerr << "soak --real: " << r.error().message << "\n";
        return 2;
    }
    soak::print_report(*r, o, std::cout);
    return r->ok() ? 0 : 1;
}

// "A..B" (inclusive, A <= B) -> {A, B}.
std::optional<std::pair<std::uint64_t, std::uint64_t>> parse_seed_range(const std::string& text) {
    const auto dots = text.find("..");
    if (dots == std::string::npos) return std::nullopt;
    try {
        std::size_t used_a = 0, used_b = 0;
        const auto a = std::stoull(text.substr(0, dots), &used_a);
        const auto b = std::stoull(text.substr(dots + 2), &used_b);
        if (used_a != dots || used_b != text.size() - dots - 2 || a > b) return std::nullopt;
        return std::pair{a, b};
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

// The simulation's options from the command line (the seed aside); exit code 2 and a
// message on bad input.
std::optional<soak::soak_options> simulation_options(const soak_cli& c) {
    soak::soak_options o;
    auto d = soak::parse_duration_ns(c.duration);
    if (!d) {
        std::cerr << "soak: " << d.error().message << "\n";
        return std::nullopt;
    }
    o.duration_ns = *d;
    o.trace_path = c.trace;
    o.check_reference = !c.no_reference;
    o.generations = c.generations;
    if (!c.model.empty() && !c.package.empty()) {
        std::cerr << "soak: give --model (cpu backend) or --package (simulated NPU), not both\n";
        return std::nullopt;
    }
    if (!c.package.empty()) {
        o.package_dir = c.package;
    } else if (!c.model.empty()) {
        o.model_dir = c.model;
    } else {
        auto tok = find_tokenizer();
        if (!tok) {
            std::cerr << "soak: " << tok.error().message << "\n";
            return std::nullopt;
        }
        o.model_dir = data_home() / "soak-models" / soak::k_soak_model_preset;
        if (auto m = soak::ensure_synthetic_model(o.model_dir, *tok); !m) {
            std::cerr << "soak: synthetic model: " << m.error().message << "\n";
            return std::nullopt;
        }
    }
    return o;
}

std::string reproduce_line(const soak_cli& c, std::uint64_t seed) {
    return "reproduce: calserve soak --seed=" + std::to_string(seed) + " --duration=" + c.duration +
           (c.model.empty() ? "" : " --model=" + c.model) + (c.package.empty() ? "" : " --package=" + c.package) +
           (c.generations ? " --generations" : "");
}

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int run_one_seed(const soak_cli& c, soak::soak_options o) {
    o.seed = c.seed;
    auto started = std::chrono::steady_clock::now();
    auto r = soak::run_soak(o, std::cout);
    if (!r) {
        std::cerr << "soak: " << r.error().message << "\n";
        return 2;
    }
    std::cout << "soak: wall_s=" << seconds_since(started) << " virtual_s=" << double(r->report.end_ns) / 1e9 << "\n";
    if (!r->report.ok()) {
        std::cout << reproduce_line(c, c.seed) << "\n";
        return 1;
    }
    std::cout << "soak: ok\n";
    return 0;
}

// `--seeds A..B`: every seed in turn, one line each; a failed seed's whole report
// (and its trace, written as a single run writes it) and, at the end, every failure
// with its reproduce line.
int run_sweep(const soak_cli& c, soak::soak_options o, std::uint64_t first, std::uint64_t last) {
    const auto started = std::chrono::steady_clock::now();
    std::vector<std::uint64_t> failed;
    for (std::uint64_t seed = first; seed <= last; ++seed) {
        o.seed = seed;
        std::ostringstream out;
        const auto t = std::chrono::steady_clock::now();
        auto r = soak::run_soak(o, out);
        const bool ok = r && r->report.ok();
        std::cout << "seed " << seed << ": " << (ok ? "ok" : "FAILED") << " wall_s=" << seconds_since(t);
        if (r)
            std::cout << " virtual_s=" << double(r->report.end_ns) / 1e9 << " resets=" << r->report.device_resets
                      << " dead_episodes=" << r->report.dead_episodes;
        std::cout << std::endl;
        if (ok) continue;
        failed.push_back(seed);
        std::cout << (r ? out.str() : "soak: " + r.error().message + "\n");
    }
    std::cout << "sweep: " << (last - first + 1 - failed.size()) << " of " << (last - first + 1)
              << " seeds ok, wall_s=" << seconds_since(started) << "\n";
    for (auto seed : failed) std::cout << reproduce_line(c, seed) << "\n";
    return failed.empty() ? 0 : 1;
}

int run_soak_cli(const soak_cli& c) {
    if (c.real && (!c.model.empty() || !c.package.empty() || !c.trace.empty() || c.no_reference || !c.seeds.empty())) {
        std::cerr << "soak --real: --model, --package, --trace, --seeds and --no-reference belong to the simulation\n";
        return 2;
    }
    if (!c.real && (!c.url.empty() || !c.control_socket.empty() || !c.out.empty() || c.daemon_pid != 0)) {
        std::cerr << "soak: --url, --control-socket, --out and --daemon-pid need --real\n";
        return 2;
    }
    if (c.real) return run_real_soak_cli(c);
    std::optional<std::pair<std::uint64_t, std::uint64_t>> range;
    if (!c.seeds.empty()) {
        range = parse_seed_range(c.seeds);
        if (!range || !c.trace.empty()) {
            std::cerr << "soak: --seeds takes A..B (A <= B), without --trace\n";
            return 2;
        }
    }
    auto o = simulation_options(c);
    if (!o) return 2;
    spdlog::set_level(c.verbose ? spdlog::level::info : spdlog::level::err);  // faults log a lot by design
    if (range && !c.verbose) spdlog::set_level(spdlog::level::off);  // a sweep reports per seed
    return range ? run_sweep(c, *o, range->first, range->second) : run_one_seed(c, *o);
}

const bool registered = register_command(
    "soak", "seeded deterministic simulation (or --real: load with faults against a live daemon)", [](CLI::App& app) {
        auto c = std::make_shared<soak_cli>();
        app.add_option("--seed", c->seed, "seed every option and input derives from");
        app.add_option("--seeds", c->seeds, "A..B: sweep seeds A to B, one line each, failures with reproduce lines");
        app.add_option("--duration", c->duration, "traffic time (virtual, or wall with --real): 500ms, 90s, 15m, 1h, 24h");
        app.add_option("--model", c->model, "Hugging Face model directory, cpu backend (default: synthetic micro-dense)");
        app.add_option("--package", c->package, "calbin package directory: soak the simulated NPU with its latency model");
        app.add_option("--trace", c->trace, "record the run's inputs and messages to this JSONL file");
        app.add_flag("--no-reference", c->no_reference, "skip the greedy-vs-reference check (faster)");
        app.add_flag("--generations", c->generations,
                     "switch release generations under the traffic: load the same model kept beside (--keep), roll back, ...");
        app.add_flag("-v,--verbose", c->verbose, "keep the engine's info logs");
        app.add_flag("--real", c->real, "wall-clock load with faults against a live daemon (--url)");
        app.add_option("--url", c->url, "--real: the daemon, http://host:port");
        app.add_option("--control-socket", c->control_socket, "--real: arm random device faults through it");
        app.add_option("--concurrency", c->concurrency, "--real: closed-loop clients (default 4)");
        app.add_option("--sample-interval", c->sample_interval, "--real: /metrics scrape period (default 1s)");
        app.add_option("--warmup", c->warmup, "--real: leading share left out of slopes (default 20%)");
        app.add_option("--out", c->out, "--real: write every sample as a JSON line to this file");
        app.add_option("--daemon-pid", c->daemon_pid, "--real: the daemon's pid; hostile clients also send it SIGHUP");
        return [c] { return run_soak_cli(*c); };
    });
}  // namespace
}  // namespace calserve::tools::cmd_soak
