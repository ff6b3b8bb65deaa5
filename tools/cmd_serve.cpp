// `calserve serve`: the daemon. main-style wiring only: config -> runtime ->
// engine (actors + device) -> HTTP server (+ control socket) -> signals.
//
// With no arguments it serves the tiny default package on the simulated NPU at
// 127.0.0.1:8080, writing the package on first run. SIGTERM/SIGINT drain: /ready
// goes false, new work gets 503, in-flight requests get `server.drain_timeout_ms`
// to finish, then the process exits 0.
#include <CLI/CLI.hpp>
#include <boost/asio/signal_set.hpp>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <spdlog/spdlog.h>
#include <thread>

#include "net/engine_control.hpp"
#include "actors/metrics.hpp"
#include "actors/serving_engine.hpp"
#include "config/log.hpp"
#include "model/package/pack.hpp"
#include "net/control_socket.hpp"
#include "net/http_server.hpp"
#include "tools/command.hpp"
#include "tools/paths.hpp"

namespace calserve::tools {
namespace {

struct serve_options {
    std::string package_dir;
    std::string model_dir;
    std::string config_file;
    std::vector<std::string> overrides;
    std::string host;
    int port = -1;
    std::string api_key;
    std::string control_socket;
    std::string model_name;
    std::string preset = "tiny-dense-1chip";
};

result<std::filesystem::path> ensure_default_package(const std::string& preset) {
    auto dir = data_home() / "packages" / preset;
    if (std::filesystem::exists(dir / "calserve-manifest.json")) return dir;
    auto tok = tokenizer_dir();
    if (!tok) return tok.error();
    spdlog::info("serve: writing the default package {} to {}", preset, dir.string());
    std::filesystem::create_directories(dir);
    model::package::pack_options o;
    o.preset = preset;
    o.out = dir;
    o.tokenizer_dir = *tok;
    if (auto p = model::package::pack(o); !p) return p.error();
    return dir;
}

int run_serve(const serve_options& o) {
    std::vector<std::string> overrides = o.overrides;
    if (!o.host.empty()) overrides.push_back("server.host=" + o.host);
    if (o.port >= 0) overrides.push_back("server.port=" + std::to_string(o.port));
    if (!o.api_key.empty()) overrides.push_back("server.api_key=" + o.api_key);
    if (!o.control_socket.empty()) overrides.push_back("server.control_socket=" + o.control_socket);
    std::optional<std::filesystem::path> file;
    if (!o.config_file.empty()) file = o.config_file;
    auto cfg = config::load(file, overrides);
    if (!cfg) {
        std::cerr << "serve: " << cfg.error().message << "\n";
        return 2;
    }
    if (auto l = init_logging(cfg->string("log.level")); !l) {
        std::cerr << "serve: " << l.error().message << "\n";
        return 2;
    }

    actors::engine_setup setup;
    setup.model_name = o.model_name;
    if (!o.model_dir.empty()) {
        setup.model_dir = o.model_dir;
    } else if (!o.package_dir.empty()) {
        setup.package_dir = o.package_dir;
    } else {
        auto dir = ensure_default_package(o.preset);
        if (!dir) {
            std::cerr << "serve: cannot create the default package: " << dir.error().what() << "\n";
            return 2;
        }
        setup.package_dir = *dir;
    }

    actors::metrics::registry registry;
    actors::calserve_metrics metrics(registry);
    setup.metrics = &metrics;
    actors::runtime rt(actors::run_mode::threaded, std::size_t(cfg->integer("server.threads")));
    auto engine = actors::serving_engine::create(rt, *cfg, setup);
    if (!engine) {
        std::cerr << "serve: " << engine.error().what() << "\n";
        return 2;
    }
    net::http_server server(rt.context(), **engine, metrics, net::server_options::from_config(*cfg));
    auto port = server.start();
    if (!port) {
        std::cerr << "serve: cannot listen: " << port.error().what() << "\n";
        return 2;
    }
    actors::engine_control control(**engine, &metrics);
    std::optional<net::control_server> control_server;
    if (auto path = cfg->string("server.control_socket"); !path.empty()) {
        control_server.emplace(rt.context(), control, net::control_options{path, std::nullopt});
        if (auto c = control_server->start(); !c) {
            std::cerr << "serve: cannot open the control socket: " << c.error().what() << "\n";
            server.stop();
            return 2;
        }
        spdlog::info("serve: control socket at {}", path);
    }
    std::cout << "calserve: serving '" << (*engine)->card().name << "' on http://" << cfg->string("server.host") << ":"
              << *port << " (" << (*engine)->card().backend << " backend)" << std::endl;

    std::mutex mutex;
    std::condition_variable cv;
    bool stop_requested = false;
    boost::asio::signal_set signals(rt.context(), SIGINT, SIGTERM);
    signals.async_wait([&](boost::system::error_code ec, int sig) {
        if (ec) return;
        spdlog::info("serve: signal {}: draining", sig);
        std::lock_guard lock(mutex);
        stop_requested = true;
        cv.notify_all();
    });
    rt.start();
    {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return stop_requested; });
    }
    server.drain();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(cfg->integer("server.drain_timeout_ms"));
    while ((*engine)->in_flight() > 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto left = (*engine)->in_flight();
    if (left > 0) spdlog::warn("serve: drain timeout with {} requests in flight", left);
    if (control_server) control_server->stop();
    server.stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let closing sockets flush
    rt.stop();
    engine->reset();
    spdlog::info("serve: stopped");
    return 0;
}

const bool registered = register_command("serve", "run the OpenAI-compatible streaming daemon", [](CLI::App& app) {
    auto o = std::make_shared<serve_options>();
    app.add_option("--package", o->package_dir, "calbin package directory (sim backend)");
    app.add_option("--model", o->model_dir, "Hugging Face model directory (cpu backend)");
    app.add_option("--config", o->config_file, "JSON config file");
    app.add_option("--set", o->overrides, "key.path=value override (repeatable)");
    app.add_option("--host", o->host, "listen address (server.host)");
    app.add_option("--port", o->port, "listen port (server.port)");
    app.add_option("--api-key", o->api_key, "require this bearer key on /v1 routes");
    app.add_option("--control-socket", o->control_socket, "Unix-domain control socket path");
    app.add_option("--served-model-name", o->model_name, "model id reported by /v1/models");
    app.add_option("--preset", o->preset, "default package preset when no --package/--model is given");
    return [o] { return run_serve(*o); };
});

}  // namespace
}  // namespace calserve::tools
