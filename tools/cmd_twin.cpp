// `calserve twin --package DIR | --preset NAME [--set k=v]... [--candidate ...]`:
// `calserve bench`'s closed loop (concurrency, prompt and output lengths) run in
// virtual time on the real engine over the simulated device, one row per
// candidate (soak/closed_loop.hpp, docs/twin.md section 7). Exit 0, or 2.
#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <iostream>
#include <spdlog/spdlog.h>

#include "config/json_text.hpp"
#include "soak/closed_loop.hpp"
#include "tools/candidate_spec.hpp"
#include "tools/command.hpp"
#include "tools/data_paths.hpp"

namespace calserve::tools::cmd_twin {
namespace {

struct twin_cli {
    std::string package, preset;
    std::vector<std::string> overrides, candidates;
    soak::closed_loop_options loop;
    bool json = false, requests = false;
};

result<std::vector<candidate_spec>> runs_of(const twin_cli& cli) {
    candidate_spec main{"predicted", cli.package, cli.overrides};
    if (!cli.preset.empty()) {
        auto dir = ensure_preset_package(cli.preset);
        if (!dir) return dir.error();
        main.package_dir = *dir;
    }
    if (main.package_dir.empty()) return make_error(status::invalid_argument, "give --package DIR or --preset NAME");
    std::vector<candidate_spec> runs{main};
    for (const auto& spec : cli.candidates) {
        auto c = parse_candidate(spec);
        if (!c) return c.error();
        if (c->package_dir.empty()) c->package_dir = main.package_dir;
        // A candidate's keys go on top of the main run's.
        auto keys = main.overrides;
        keys.insert(keys.end(), c->overrides.begin(), c->overrides.end());
        c->overrides = std::move(keys);
        runs.push_back(std::move(*c));
    }
    return runs;
}

int run_cli(const twin_cli& cli) {
    spdlog::set_level(spdlog::level::err);
    auto runs = runs_of(cli);
    if (!runs) {
        std::cerr << "twin: " << runs.error().message << "\n";
        return 2;
    }
    std::vector<soak::what_if_report> reports;
    for (const auto& run : *runs) {
        auto o = cli.loop;
        o.package_dir = run.package_dir;
        o.overrides = run.overrides;
        auto r = soak::run_closed_loop(o);
        if (!r) {
            std::cerr << "twin: " << run.label << ": " << r.error().message << "\n";
            return 2;
        }
        for (const auto& v : r->violations) std::cerr << "twin: " << run.label << ": " << v << "\n";
        soak::what_if_report w;
        w.label = run.label;
        w.predicted = r->summary;
        w.engine = r->engine;
        w.predicted_rows = r->rows;
        reports.push_back(std::move(w));
    }
    if (cli.json) {
        boost::json::array rows;
        for (const auto& r : reports) rows.push_back(soak::to_json(r));
        std::cout << json_text(boost::json::object{{"runs", std::move(rows)}}) << "\n";
        return 0;
    }
    std::cout << "closed loop: concurrency " << cli.loop.concurrency << ", " << cli.loop.requests << " requests (+"
              << cli.loop.warmup << " warm-up), " << cli.loop.prompt_tokens << " prompt tokens, " << cli.loop.output_tokens
              << " output tokens; virtual time\n";
    std::cout << soak::render_table(reports);
    if (cli.requests)
        for (const auto& r : reports) std::cout << r.label << ":\n" << soak::render_requests(r);
    return 0;
}

const bool registered = register_command("twin", "calserve bench's closed loop in virtual time on a package (docs/twin.md)",
                                          [](CLI::App& app) {
    auto cli = std::make_shared<twin_cli>();
    auto* pkg = app.add_option("--package", cli->package, "the package to run on (sim backend)");
    app.add_option("--preset", cli->preset, "a preset package (written under the data home)")->excludes(pkg);
    app.add_option("--set", cli->overrides, "configuration key=value (every row)");
    app.add_option("--candidate", cli->candidates,
                   "another row, LABEL=ITEM[,ITEM]... with package:DIR, preset:NAME or key=value (on top of --set)");
    app.add_option("--concurrency", cli->loop.concurrency, "requests kept in flight")->check(CLI::Range(1, 4096));
    app.add_option("--requests", cli->loop.requests, "measured requests")->check(CLI::Range(1, 1000000));
    app.add_option("--warmup", cli->loop.warmup, "warm-up requests, sent first and not counted")->check(CLI::Range(0, 1000000));
    app.add_option("--prompt-tokens", cli->loop.prompt_tokens, "prompt length in tokens")->check(CLI::Range(1, 1 << 20));
    app.add_option("--output-tokens", cli->loop.output_tokens, "tokens generated per request (ignore_eos)")
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--seed", cli->loop.seed, "seed of the prompts' token ids");
    app.add_flag("--per-request", cli->requests, "per request: arrival, TTFT, TPOT, end-to-end, worst gap (every row)");
    app.add_flag("--json", cli->json, "one JSON object: runs (predicted, engine per row)");
    return [cli] { return run_cli(*cli); };
});
}  // namespace
}  // namespace calserve::tools::cmd_twin
