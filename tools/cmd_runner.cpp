// `calserve runner golden|stress|fault --package DIR`: the standalone G7 runner on
// the device interface (simulated NPU), no server. Writes a JSON report.
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <memory>

#include "device/runner/runner.hpp"
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
};

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
    const std::string text = boost::json::serialize(rep.json);
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
    "runner", "G7 runner on the device interface: golden | stress | fault (no server)", [](CLI::App& app) {
        auto o = std::make_shared<options>();
        app.add_option("mode", o->mode, "golden, stress or fault")->required()->check(CLI::IsMember({"golden", "stress", "fault"}));
        app.add_option("--package", o->package, "package directory")->required();
        app.add_option("--output", o->output, "write the JSON report here (default: stdout)");
        app.add_option("--config", o->config_file, "config file");
        app.add_option("--set", o->overrides, "key.path=value override (repeatable), e.g. device.sim.step_ms=1");
        app.add_flag("--virtual-time", o->virtual_time, "run the simulator in virtual time (no real waiting)");
        app.add_option("--seed", o->seed, "seed of prompts, stress choices and fault probabilities");
        app.add_option("--duration", o->duration_s, "stress: seconds to keep submitting");
        app.add_option("--sequences", o->sequences, "stress: concurrent sequences");
        app.add_option("--wait-ms", o->wait_ms, "Wait() bound for normal jobs");
        app.add_option("--fault-wait-ms", o->fault_wait_ms, "fault: Wait() bound of the timeout scenarios");
        app.add_option("--reference-threads", o->reference_threads, "threads of the reference model");
        return [o] { return run(*o); };
    });
}  // namespace
}  // namespace calserve::tools::cmd_runner
