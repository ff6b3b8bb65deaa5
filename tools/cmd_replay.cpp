// `calserve replay TRACE`: re-runs a trace's external inputs at their recorded
// virtual times on the deterministic runtime and compares the message stream.
// Exit 0: identical; 1: diverged (first divergence printed); 2: unreadable trace.
//
// `calserve replay TRACE --what-if [--package DIR | --preset NAME] [--set k=v]...`:
// the recorded workload on another package or configuration, predicted times
// beside the recorded ones (soak/what_if.hpp, docs/twin.md). Exit 0, or 2.
#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <iostream>
#include <spdlog/spdlog.h>

#include "config/json_text.hpp"
#include "device/package_spec.hpp"
#include "io/bench_workload.hpp"
#include "soak/soak.hpp"
#include "soak/what_if.hpp"
#include "tools/candidate_spec.hpp"
#include "tools/command.hpp"
#include "tools/data_paths.hpp"

namespace calserve::tools::cmd_replay {
namespace {

struct what_if_cli {
    bool enabled = false, json = false, faults = false, requests = false;
    std::string package, preset;
    std::vector<std::string> overrides, candidates;
    soak::slo_targets slo;
};

int run_replay_cli(const io::trace_file& trace) {
    auto r = soak::run_replay(trace);
    if (!r) {
        std::cerr << "replay: " << r.error().message << "\n";
        return 2;
    }
    if (r->fire_divergence) {
        std::cout << "fault firings diverged at firing " << *r->fire_divergence << " (messages identical so far: "
                  << r->compared << ")\n  expected: " << r->expected << "\n  got:      " << r->got << "\n";
        return 1;
    }
    if (!r->divergence_seq) {
        std::cout << "identical (" << r->compared << " messages, " << r->fires_compared << " fault firings)\n";
        return 0;
    }
    std::cout << "diverged at sequence " << *r->divergence_seq << " after " << r->compared << " identical messages\n"
              << "  expected: " << r->expected << "\n  got:      " << r->got << "\n";
    return 1;
}

// A candidate (tools/candidate_spec.hpp) as the replay's options.
result<std::pair<std::string, soak::replay_options>> parse_candidate(const std::string& spec, bool faults) {
    auto c = tools::parse_candidate(spec);
    if (!c) return c.error();
    soak::replay_options o;
    o.operator_inputs = faults;
    o.package_dir = c->package_dir;
    o.overrides = c->overrides;
    return std::pair{c->label, o};
}

int run_what_if_cli(const io::trace_file& trace, const what_if_cli& cli) {
    std::vector<std::pair<std::string, soak::replay_options>> runs;
    soak::replay_options main;
    main.operator_inputs = cli.faults;
    main.package_dir = cli.package;
    main.overrides = cli.overrides;
    if (!cli.preset.empty()) {
        auto dir = ensure_preset_package(cli.preset);
        if (!dir) {
            std::cerr << "replay: " << dir.error().message << "\n";
            return 2;
        }
        main.package_dir = *dir;
    }
    const bool own = main.package_dir.empty() && main.overrides.empty();
    runs.emplace_back(own ? "own config" : "predicted", main);
    for (const auto& spec : cli.candidates) {
        auto c = parse_candidate(spec, cli.faults);
        if (!c) {
            std::cerr << "replay: " << c.error().message << "\n";
            return 2;
        }
        runs.push_back(std::move(*c));
    }
    std::vector<soak::what_if_report> reports;
    for (const auto& [label, options] : runs) {
        auto r = soak::run_what_if(trace, options, cli.slo, label);
        if (!r) {
            std::cerr << "replay: " << label << ": " << r.error().message << "\n";
            return 2;
        }
        reports.push_back(std::move(*r));
    }
    if (cli.json) {
        auto o = soak::to_json(reports.front());
        boost::json::array candidates;
        for (std::size_t i = 1; i < reports.size(); ++i) candidates.push_back(soak::to_json(reports[i]));
        if (!candidates.empty()) o["candidates"] = std::move(candidates);
        std::cout << json_text(o) << "\n";
        return 0;
    }
    if (!reports.front().recorded)
        std::cout << "(no recorded column: the trace has no done records -- a soak trace, or a daemon trace from before the what-if replay)\n";
    std::cout << soak::render_table(reports);
    const auto& first = reports.front();
    std::cout << "message stream: "
              << (first.stream_identical ? "identical to the recording (" + std::to_string(first.messages_compared) + " messages)"
                                         : "differs from the recording after " + std::to_string(first.messages_compared) + " messages")
              << "\n";
    if (cli.requests) std::cout << soak::render_requests(first);
    return 0;
}

// A `calserve bench` requests.jsonl: prompts of the recorded lengths drawn from a seed,
// on the package the what-if names (io/bench_workload.hpp).
result<io::trace_file> read_workload(const std::string& path, what_if_cli& cli) {
    if (!cli.enabled) return make_error(status::invalid_argument, path + " is a bench workload: replay it with --what-if");
    if (!cli.preset.empty()) {
        auto dir = ensure_preset_package(cli.preset);
        if (!dir) return dir.error();
        cli.package = dir->string();
        cli.preset.clear();
    }
    if (cli.package.empty())
        return make_error(status::invalid_argument, "a bench workload names no package: give --package DIR or --preset NAME");
    auto spec = device::package_spec_from_dir(cli.package);
    if (!spec) return spec.error();
    auto file = io::read_bench_workload(path, 1, spec->vocab_size);
    if (file) file->header.package_dir = cli.package;
    return file;
}

int run_cli(const std::string& path, what_if_cli cli) {
    auto trace = io::is_bench_workload(path) ? read_workload(path, cli) : io::read_trace(path);
    if (!trace) {
        std::cerr << "replay: " << trace.error().message << "\n";
        return 2;
    }
    if (trace->end && trace->end->dropped > 0)
        std::cerr << "replay: warning: the recorder dropped " << trace->end->dropped << " records\n";
    spdlog::set_level(spdlog::level::err);  // the replayed faults would log as they did when recorded
    return cli.enabled ? run_what_if_cli(*trace, cli) : run_replay_cli(*trace);
}

const bool registered = register_command("replay", "replay a trace and compare its message stream, or a what-if", [](CLI::App& app) {
    auto path = std::make_shared<std::string>();
    auto cli = std::make_shared<what_if_cli>();
    app.add_option("trace", *path, "trace file (JSONL) written by soak --trace or serve --trace, or a bench requests.jsonl (--what-if)")->required();
    auto* w = app.add_flag("--what-if", cli->enabled, "re-run the recorded workload, predicted beside recorded times");
    auto* pkg = app.add_option("--package", cli->package, "what-if: the package to run it on")->needs(w);
    app.add_option("--preset", cli->preset, "what-if: a preset package (written under the data home)")->needs(w)->excludes(pkg);
    app.add_option("--set", cli->overrides, "what-if: configuration key=value on top of the recorded ones")->needs(w);
    app.add_option("--candidate", cli->candidates,
                   "what-if: another row, LABEL=ITEM[,ITEM]... with package:DIR, preset:NAME or key=value")->needs(w);
    app.add_flag("--faults", cli->faults, "what-if: also apply the recorded fault arms, operator commands and model ops")->needs(w);
    app.add_option("--slo-ttft-ms", cli->slo.ttft_ms, "what-if: goodput target on time to first token")->needs(w);
    app.add_option("--slo-tpot-ms", cli->slo.tpot_ms, "what-if: goodput target on time per output token")->needs(w);
    app.add_flag("--json", cli->json, "what-if: one JSON object (predicted, recorded, engine, stream, candidates)")->needs(w);
    app.add_flag("--requests", cli->requests, "what-if: per-request predicted / recorded times")->needs(w);
    return [path, cli] { return run_cli(*path, *cli); };
});
}  // namespace
}  // namespace calserve::tools::cmd_replay
