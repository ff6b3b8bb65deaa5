// `calserve replay TRACE`: re-runs a trace's external inputs at their recorded
// virtual times on the deterministic runtime and compares the message stream.
// Exit 0: identical; 1: diverged (first divergence printed); 2: unreadable trace.
#include <CLI/CLI.hpp>
#include <iostream>
#include <spdlog/spdlog.h>

#include "soak/soak.hpp"
#include "tools/command.hpp"

namespace calserve::tools::cmd_replay {
namespace {
int run_replay_cli(const std::string& path) {
    auto trace = io::read_trace(path);
    if (!trace) {
        std::cerr << "replay: " << trace.error().message << "\n";
        return 2;
    }
    if (trace->end && trace->end->dropped > 0)
        std::cerr << "replay: warning: the recorder dropped " << trace->end->dropped << " records\n";
    spdlog::set_level(spdlog::level::err);  // the replayed faults would log as they did when recorded
    auto r = soak::run_replay(*trace);
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

const bool registered = register_command("replay", "replay a trace and compare its message stream", [](CLI::App& app) {
    auto path = std::make_shared<std::string>();
    app.add_option("trace", *path, "trace file (JSONL) written by soak --trace")->required();
    return [path] { return run_replay_cli(*path); };
});
}  // namespace
}  // namespace calserve::tools::cmd_replay
