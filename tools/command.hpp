#pragma once
//! Subcommand registry of the `calserve` binary (git-style: serve, validate, bench, ...).
//! Each tools/cmd_*.cpp registers itself at static-init time; tools/ sources are
//! compiled straight into the executable, so no registration is dropped by the linker.
//! A command's setup adds its options to its CLI11 sub-app and returns the function
//! that runs it (exit code: 0 ok, 1 failed/negative verdict, 2 unusable input).
#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace calserve::tools {

using command_runner = std::function<int()>;
using command_setup = std::function<command_runner(CLI::App&)>;

struct command_spec {
    std::string name;
    std::string help;
    command_setup setup;
};

std::vector<command_spec>& command_registry();
bool register_command(std::string name, std::string help, command_setup setup);

}  // namespace calserve::tools
