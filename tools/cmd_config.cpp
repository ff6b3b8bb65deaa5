// `calserve config`: print the default configuration, or check a config file.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "config/config.hpp"
#include "tools/command.hpp"

namespace calserve::tools::cmd_config {
namespace {
struct options {
    bool print_defaults = false;
    std::string check;
    std::vector<std::string> overrides;
};

const bool registered = register_command("config", "print the default config or check a config file", [](CLI::App& app) {
    auto o = std::make_shared<options>();
    app.add_flag("--print-defaults", o->print_defaults, "print the full default configuration as JSON");
    app.add_option("--check", o->check, "validate a config file (with any --set) and print the result");
    app.add_option("--set", o->overrides, "key.path=value override (repeatable)");
    return [o] {
        if (!o->check.empty() || !o->overrides.empty()) {
            std::optional<std::filesystem::path> file;
            if (!o->check.empty()) file = o->check;
            auto cfg = config::load(file, o->overrides);
            if (!cfg) {
                std::cerr << "config: " << cfg.error().message << "\n";
                return 2;
            }
            std::cout << cfg->to_json();
            return 0;
        }
        std::cout << config::defaults().to_json();
        return 0;
    };
});
}  // namespace
}  // namespace calserve::tools::cmd_config
