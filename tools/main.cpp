// calserve: one binary, many subcommands. main only wires the registry to CLI11.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <map>

#include "tools/command.hpp"

namespace calserve::tools {
std::vector<command_spec>& command_registry() {
    static std::vector<command_spec> registry;
    return registry;
}
bool register_command(std::string name, std::string help, command_setup setup) {
    command_registry().push_back({std::move(name), std::move(help), std::move(setup)});
    return true;
}
}  // namespace calserve::tools

int main(int argc, char** argv) {
    using namespace calserve::tools;
    CLI::App app{"calserve - LLM serving runtime for the Calculet NPU (and its simulator)"};
    app.require_subcommand(1);
    auto specs = command_registry();
    std::sort(specs.begin(), specs.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    std::map<CLI::App*, command_runner> runners;
    for (auto& spec : specs) {
        CLI::App* sub = app.add_subcommand(spec.name, spec.help);
        runners[sub] = spec.setup(*sub);
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        int rc = app.exit(e);
        return rc == 0 ? 0 : 2;
    }
    for (auto& [sub, run] : runners) {
        if (sub->parsed()) {
            try {
                return run();
            } catch (const std::exception& e) {
                std::cerr << "calserve " << sub->get_name() << ": " << e.what() << "\n";
                return 1;
            }
        }
    }
    return 2;
}
