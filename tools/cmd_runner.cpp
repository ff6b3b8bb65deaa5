// `calserve runner golden|stress|fault|speculative --package DIR`: the standalone G7 runner
// on the device interface (simulated NPU), no server, and the speculative-decoding run
// (plain against drafting, same tokens; also on the cpu backend with --model). Writes a JSON report.
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <memory>

#include "config/json_text.hpp"
#include "device/runner/runner.hpp"
#include "device/runner/speculative.hpp"
#include "device/sim/cpu_backend.hpp"
#include "device/sim/reference_model.hpp"
#include "model/cpu/transformer.hpp"
#include "tools/command.hpp"

namespace calserve::tools::cmd_runner {
namespace {
struct options {
    std::string mode;
    std::string package;
    std::string output;
    std::string config_file;
    std::vector<std::string> overrides;
    bool virtual_time = false;
    std::uint64_t seed = 1;
    double duration_s = 10;
    double wait_ms = 30000;
    double fault_wait_ms = 200;
    int sequences = 8;
    int reference_threads = 2;
    // speculative
    std::string model;
    int prompt_tokens = 64;
    int max_tokens = 128;
    float temperature = 0;
    std::string workload = "repeat";
    double position_cost = -1;
};

// One more position of a verify step over a one-token step, at `rows` rows of past
// `past`, by the simulator's latency model (none: the runner's default).
double position_cost(const device::sim::sim_device& dev, std::int64_t rows, std::int64_t past) {
    const auto* lm = dev.latency();
    if (!lm) return -1;
    const std::vector<std::int64_t> pasts(std::size_t(rows), past), runs(std::size_t(rows), 2);
    const double one = lm->decode_batch_step(pasts, rows).total_ms;
    const double two = lm->verify_batch_step(pasts, runs, rows).total_ms;
    return one > 0 ? (two - one) / one : -1;
}

int run_speculative(const options& o, const config& cfg, device::sim::sim_scheduler& clock) {
    auto dev = o.model.empty() ? device::sim::open_sim_device(o.package, cfg, clock)
                               : device::sim::open_cpu_device(o.model, cfg, clock, {}, 64);
    if (!dev) {
        std::cerr << "runner: cannot bring up the device: " << dev.error().what() << "\n";
        return 2;
    }
    device::runner::speculative_options so;
    so.sequences = o.sequences;
    so.prompt_tokens = o.prompt_tokens;
    so.max_tokens = o.max_tokens;
    so.temperature = o.temperature;
    so.seed = o.seed;
    so.workload = o.workload;
    so.wait_limit = std::chrono::microseconds(static_cast<std::int64_t>(o.wait_ms * 1e3));
    so.spec = model::speculative::speculative_options::from_config(cfg);
    so.spec.drafter.kind = model::speculative::method::ngram;  // the mode exists to draft
    so.spec.policy.enabled = true;
    so.position_cost = o.position_cost >= 0 ? o.position_cost : position_cost(**dev, o.sequences, o.prompt_tokens);
    auto rep = device::runner::run_speculative(**dev, so);
    rep.json["time"] = o.model.empty() ? (o.virtual_time ? "virtual" : "real") : "cpu backend (wall)";
    rep.json["position_cost"] = so.position_cost;
    std::cout << json_text(rep.json) << "\n";
    std::cerr << "runner speculative: " << (rep.pass ? "pass" : "FAIL") << "\n";
    return rep.pass ? 0 : 1;
}

std::unique_ptr<device::sim::sim_scheduler> make_clock(bool virtual_time) {
    if (virtual_time) return std::make_unique<device::sim::manual_scheduler>();
    return std::make_unique<device::sim::realtime_scheduler>();
}

int run(const options& o) {
    std::optional<std::filesystem::path> file;
    if (!o.config_file.empty()) file = o.config_file;
    auto cfg = config::load(file, o.overrides);
    if (!cfg) {
        std::cerr << "runner: " << cfg.error().what() << "\n";
        return 2;
    }
    auto clock = make_clock(o.virtual_time);
    if (o.mode == "speculative") return run_speculative(o, *cfg, *clock);
    auto faults = std::make_shared<device::fault_registry>(o.seed);
    auto dev = device::sim::open_sim_device(o.package, *cfg, *clock, faults);
    if (!dev) {
        std::cerr << "runner: cannot bring up the device: " << dev.error().what() << "\n";
        return 2;
    }
    // The reference runs without the device and unsplit (tensor_parallel 1), in the
    // device's arithmetic mode (fp32 when it does not say): the report names it.
    model::load_options lo;
    lo.threads = o.reference_threads;
    lo.arith = model::parse_arithmetic((*dev)->info().arithmetic).value_or(model::arithmetic::fp32);
    auto reference = model::load_causal_lm((*dev)->package().reference_model_dir, lo);
    if (!reference) {
        std::cerr << "runner: reference model: " << reference.error().what() << "\n";
        return 2;
    }
    device::runner::runner_options ro;
    ro.seed = o.seed;
    ro.wait_limit = std::chrono::microseconds(static_cast<std::int64_t>(o.wait_ms * 1e3));
    ro.fault_wait_limit = std::chrono::microseconds(static_cast<std::int64_t>(o.fault_wait_ms * 1e3));
    ro.duration = std::chrono::milliseconds(static_cast<std::int64_t>(o.duration_s * 1e3));
    ro.sequences = o.sequences;
    device::runner::runner_report rep;
    if (o.mode == "golden") {
        rep = device::runner::run_golden(**dev, **reference, ro);
    } else if (o.mode == "fault") {
        rep = device::runner::run_fault(**dev, *faults, **reference, ro);
    } else {
        rep = device::runner::run_stress(**dev, **reference, ro);
    }
    rep.json["time"] = o.virtual_time ? "virtual" : "real";
    rep.json["arithmetic"] = model::to_string(lo.arith);
    const std::string text = json_text(rep.json);
    if (!o.output.empty()) {
        std::ofstream out(o.output, std::ios::binary | std::ios::trunc);
        out << text << "\n";
        if (!out) {
            std::cerr << "runner: cannot write " << o.output << "\n";
            return 1;
        }
    } else {
        std::cout << text << "\n";
    }
    std::cerr << "runner " << o.mode << ": " << (rep.pass ? "pass" : "FAIL") << "\n";
    return rep.pass ? 0 : 1;
}

const bool registered = register_command(
    "runner", "G7 runner on the device interface: golden | stress | fault | speculative (no server)", [](CLI::App& app) {
        auto o = std::make_shared<options>();
        app.add_option("mode", o->mode, "golden, stress, fault or speculative")
            ->required()
            ->check(CLI::IsMember({"golden", "stress", "fault", "speculative"}));
        auto* package = app.add_option("--package", o->package, "package directory (one of --package, --model)");
        auto* model_dir = app.add_option("--model", o->model,
                                         "speculative: a Hugging Face Qwen3 directory on the cpu backend instead of a package");
        package->excludes(model_dir);
        app.add_option("--prompt-tokens", o->prompt_tokens, "speculative: prompt length");
        app.add_option("--max-tokens", o->max_tokens, "speculative: tokens generated per request");
        app.add_option("--temperature", o->temperature, "speculative: 0 = greedy, else seeded sampling");
        app.add_option("--workload", o->workload, "speculative: repeat (prompts repeating a span) or random")
            ->check(CLI::IsMember({"repeat", "random"}));
        app.add_option("--position-cost", o->position_cost,
                       "speculative: policy's cost of one more position over a step (default: the latency model's)");
        app.add_option("--output", o->output, "write the JSON report here (default: stdout)");
        app.add_option("--config", o->config_file, "config file");
        app.add_option("--set", o->overrides, "key.path=value override (repeatable), e.g. device.sim.step_ms=1");
        app.add_flag("--virtual-time", o->virtual_time, "run the simulator in virtual time (no real waiting)");
        app.add_option("--seed", o->seed, "seed of prompts, stress choices and fault probabilities");
        app.add_option("--duration", o->duration_s, "stress: seconds to keep submitting");
        app.add_option("--sequences", o->sequences, "stress: concurrent sequences; speculative: rows per step");
        app.add_option("--wait-ms", o->wait_ms, "Wait() bound for normal jobs");
        app.add_option("--fault-wait-ms", o->fault_wait_ms, "fault: Wait() bound of the timeout scenarios");
        app.add_option("--reference-threads", o->reference_threads, "threads of the reference model");
        return [o] {
            if (o->package.empty() && (o->mode != "speculative" || o->model.empty())) {
                std::cerr << "runner: --package is required (--model only with speculative)\n";
                return 2;
            }
            return run(*o);
        };
    });
}  // namespace
}  // namespace calserve::tools::cmd_runner
