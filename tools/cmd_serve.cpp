// `calserve serve`: the daemon. main-style wiring only: config -> runtime ->
// engine (actors + device) -> HTTP server (+ control socket) -> signals; this file
// reads the command line and the configuration, tools/serve_daemon.cpp runs the steps.
//
// With no arguments it serves the tiny default package on the simulated NPU at
// 127.0.0.1:8080, writing the package on first run. SIGTERM/SIGINT drain: /ready
// goes false, new work gets 503, in-flight requests get `server.drain_timeout_ms`
// to finish, then the process exits 0. SIGHUP is logged and otherwise ignored (the
// daemon logs to stderr only: there is no file to reopen); SIGPIPE is ignored
// process-wide, so a log reader that goes away costs log lines, never the
// service. With `device.dead_exit` a dead device ends the process with exit
// code 3 (k_exit_device_dead) so that a supervisor restarts it (docs/api.md).
#include <CLI/CLI.hpp>
#include <csignal>
#include <iostream>
#include <malloc.h>
#include <optional>
#include <spdlog/spdlog.h>

#include "config/log.hpp"
#include "io/atomic_dir.hpp"
#include "model/package/pack.hpp"
#include "model/package/placement.hpp"
#include "tools/command.hpp"
#include "tools/data_paths.hpp"
#include "tools/serve_daemon.hpp"

namespace calserve::tools::cmd_serve {
namespace {

// Exit code of a daemon whose device went dead with device.dead_exit set.
constexpr int k_exit_device_dead = 3;

// Process-wide dispositions, set before any thread exists so every thread inherits
// them. SIGPIPE: a write to a closed pipe (stderr read by a log collector that went
// away) fails with EPIPE instead of killing the process; sockets already use
// MSG_NOSIGNAL. SIGHUP: ignored until the daemon's own handler (a signal_set that
// logs it) is installed, so a hang-up during start-up does not kill it either.
void set_process_signals() {
    std::signal(SIGPIPE, SIG_IGN);
    std::signal(SIGHUP, SIG_IGN);
}

struct model_spec_parts {
    std::string name, dir;
};

struct serve_options {
    std::vector<std::string> packages;  // DIR or NAME=DIR, repeatable
    std::vector<std::string> models;    // HF_DIR or NAME=HF_DIR (cpu backend), repeatable
    std::string config_file;
    std::vector<std::string> overrides;
    std::string host;
    int port = -1;
    std::string api_key;
    std::string control_socket;
    std::string trace;
    std::string model_name;
    std::string preset = "tiny-dense-1chip";
};

// "NAME=DIR" -> (NAME, DIR); a bare "DIR" takes `fallback_name` or the directory's name.
model_spec_parts split_model_arg(const std::string& arg, const std::string& fallback_name) {
    auto eq = arg.find('=');
    if (eq != std::string::npos && eq > 0 && arg.find('/') > eq) return {arg.substr(0, eq), arg.substr(eq + 1)};
    std::string name = fallback_name.empty() ? std::filesystem::path(arg).filename().string() : fallback_name;
    if (name.empty()) name = std::filesystem::path(arg).parent_path().filename().string();
    return {name, arg};
}

// The models to serve, in command-line order (packages first); the embedded default
// package when none is given. Chips from models.NAME.chips.
result<std::vector<engine::model_spec>> model_specs(const serve_options& o, const config& cfg) {
    std::vector<engine::model_spec> out;
    const bool several = o.packages.size() + o.models.size() > 1;
    auto add = [&](const std::string& arg, bool cpu) -> void_result {
        auto [name, dir] = split_model_arg(arg, several ? "" : o.model_name);
        for (const auto& m : out)
            if (m.alias == name) return make_error(status::invalid_argument, "model name '" + name + "' given twice");
        engine::model_spec m{name, dir, cpu, {}};
        if (auto chips = cfg.find_string("models." + name + ".chips"); chips && !chips->empty()) {
            auto c = model::package::parse_chip_list(*chips, std::uint32_t(cfg.integer("device.sim.chips")));
            if (!c) return make_error(c.code(), "models." + name + ".chips: " + c.error().message);
            m.chips = std::move(*c);
        }
        out.push_back(std::move(m));
        return {};
    };
    for (const auto& p : o.packages)
        if (auto r = add(p, false); !r) return r.error();
    for (const auto& m : o.models)
        if (auto r = add(m, true); !r) return r.error();
    if (out.empty()) {
        auto dir = ensure_preset_package(o.preset);
        if (!dir) return make_error(dir.code(), "cannot create the default package: " + dir.error().message);
        if (auto r = add(dir->string(), false); !r) return r.error();
    }
    return out;
}

// The configuration (file, --set, then the flags that name a key) and the process
// settings that must precede any thread: malloc arenas, logging.
result<config> load_serve_config(const serve_options& o) {
    std::vector<std::string> overrides = o.overrides;
    if (!o.host.empty()) overrides.push_back("server.host=" + o.host);
    if (o.port >= 0) overrides.push_back("server.port=" + std::to_string(o.port));
    if (!o.api_key.empty()) overrides.push_back("server.api_key=" + o.api_key);
    if (!o.control_socket.empty()) overrides.push_back("server.control_socket=" + o.control_socket);
    if (!o.trace.empty()) overrides.push_back("server.trace=" + o.trace);
    std::optional<std::filesystem::path> file;
    if (!o.config_file.empty()) file = o.config_file;
    auto cfg = config::load(file, overrides);
    if (!cfg) return cfg;
    // Before any thread exists. glibc gives each thread its own arena; the
    // daemon allocates on one thread and frees on another (requests cross from
    // the network to the actors and back), and the freed pages stay resident in
    // every arena: RSS grew ~380 MiB/h under `soak --real` with a flat heap.
    // One arena keeps RSS flat at no measured throughput cost (docs/decisions.md).
    if (auto arenas = cfg->integer("server.malloc_arenas"); arenas > 0) ::mallopt(M_ARENA_MAX, int(arenas));
    if (auto l = init_logging(cfg->string("log.level")); !l) return l.error();
    return cfg;
}

int run_serve(const serve_options& o) {
    set_process_signals();
    auto cfg = load_serve_config(o);
    if (!cfg) {
        std::cerr << "serve: " << cfg.error().message << "\n";
        return 2;
    }
    auto specs = model_specs(o, *cfg);
    if (!specs) {
        std::cerr << "serve: " << specs.error().message << "\n";
        return 2;
    }
    serve_daemon daemon(*cfg, *specs);
    if (!daemon.build_engines() || !daemon.start_http() || !daemon.start_control()) return 2;
    daemon.announce();
    const bool device_dead = daemon.run_until_stop();
    if (device_dead)
        spdlog::error("serve: the device is dead and device.dead_exit is set: exiting with code {}", k_exit_device_dead);
    daemon.drain_and_stop();
    return device_dead ? k_exit_device_dead : 0;
}

const bool registered = register_command("serve", "run the OpenAI-compatible streaming daemon", [](CLI::App& app) {
    auto o = std::make_shared<serve_options>();
    app.add_option("--package", o->packages, "calbin package directory (sim backend), or NAME=DIR; repeatable");
    app.add_option("--model", o->models, "Hugging Face model directory or GGUF file (cpu backend), or NAME=DIR; repeatable");
    app.add_option("--config", o->config_file, "JSON config file");
    app.add_option("--set", o->overrides, "key.path=value override (repeatable)");
    app.add_option("--host", o->host, "listen address (server.host)");
    app.add_option("--port", o->port, "listen port (server.port)");
    app.add_option("--api-key", o->api_key, "require this bearer key on /v1 routes");
    app.add_option("--control-socket", o->control_socket, "Unix-domain control socket path");
    app.add_option("--trace", o->trace, "record inputs and actor messages to this JSONL trace (server.trace)");
    app.add_option("--served-model-name", o->model_name, "model id reported by /v1/models");
    app.add_option("--preset", o->preset, "default package preset when no --package/--model is given");
    return [o] { return run_serve(*o); };
});

}  // namespace
}  // namespace calserve::tools::cmd_serve
