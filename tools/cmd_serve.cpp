// `calserve serve`: the daemon. main-style wiring only: config -> runtime ->
// engine (actors + device) -> HTTP server (+ control socket) -> signals.
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
#include <boost/asio/signal_set.hpp>
#include <condition_variable>
#include <csignal>
#include <functional>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <malloc.h>
#include <optional>
#include <spdlog/spdlog.h>
#include <thread>

#include "net/console/console_state.hpp"
#include "net/engine_control.hpp"
#include "actors/device_actor.hpp"
#include "engine/generation_host.hpp"
#include "metrics/metrics.hpp"
#include "engine/model_router.hpp"
#include "actors/runtime/realtime_driver.hpp"
#include "engine/serving_engine.hpp"
#include "engine/traced_engine.hpp"
#include "config/log.hpp"
#include "io/atomic_dir.hpp"
#include "model/package/pack.hpp"
#include "model/package/placement.hpp"
#include "net/control_socket.hpp"
#include "net/http_server.hpp"
#include "tools/command.hpp"
#include "tools/data_paths.hpp"

namespace calserve::tools {
namespace {
// How long streams cut by the end of the drain get to write their last error event.
constexpr std::chrono::milliseconds k_stop_grace{2000};

// Exit code of a daemon whose device went dead with device.dead_exit set.
constexpr int k_exit_device_dead = 3;
// How often the idle main thread looks at the device when device.dead_exit is set.
constexpr auto k_dead_poll = std::chrono::milliseconds(200);

// Process-wide dispositions, set before any thread exists so every thread inherits
// them. SIGPIPE: a write to a closed pipe (stderr read by a log collector that went
// away) fails with EPIPE instead of killing the process; sockets already use
// MSG_NOSIGNAL. SIGHUP: ignored until the daemon's own handler (a signal_set that
// logs it) is installed, so a hang-up during start-up does not kill it either.
void set_process_signals() {
    std::signal(SIGPIPE, SIG_IGN);
    std::signal(SIGHUP, SIG_IGN);
}

// SIGHUP: a terminal hang-up or a supervisor's "reload". Nothing to reload (the
// configuration is read once) and nothing to reopen (logs go to stderr): log it
// and keep serving. Re-arms itself until the set is cancelled or destroyed.
void on_hangup(boost::asio::signal_set& set) {
    set.async_wait([&set](boost::system::error_code ec, int) {
        if (ec) return;
        spdlog::info("serve: SIGHUP ignored (logs go to stderr; nothing to reopen or reload)");
        on_hangup(set);
    });
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

result<std::filesystem::path> ensure_default_package(const std::string& preset) {
    auto dir = default_package_dir(preset);
    // A package an older calserve wrote (other decode profiles) is rebuilt, not served.
    auto complete = [&](const std::filesystem::path& d) { return model::package::pack_is_current(d, preset); };
    if (complete(dir)) return dir;
    auto tok = find_tokenizer();
    if (!tok) return tok.error();
    spdlog::info("serve: writing the default package {} to {}", preset, dir.string());
    std::error_code ec;
    std::filesystem::create_directories(dir.parent_path(), ec);
    // Two daemons starting at once each build a copy; the first to finish publishes it.
    auto made = io::build_directory_atomically(dir, complete, [&](const std::filesystem::path& d) -> void_result {
        model::package::pack_options o;
        o.preset = preset;
        o.out = d;
        o.tokenizer_dir = *tok;
        if (auto p = model::package::pack(o); !p) return p.error();
        return {};
    });
    if (!made) return made.error();
    return dir;
}

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
result<std::vector<actors::model_spec>> model_specs(const serve_options& o, const config& cfg) {
    std::vector<actors::model_spec> out;
    const bool several = o.packages.size() + o.models.size() > 1;
    auto add = [&](const std::string& arg, bool cpu) -> void_result {
        auto [name, dir] = split_model_arg(arg, several ? "" : o.model_name);
        for (const auto& m : out)
            if (m.alias == name) return make_error(status::invalid_argument, "model name '" + name + "' given twice");
        actors::model_spec m{name, dir, cpu, {}};
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
        auto dir = ensure_default_package(o.preset);
        if (!dir) return make_error(dir.code(), "cannot create the default package: " + dir.error().message);
        if (auto r = add(dir->string(), false); !r) return r.error();
    }
    return out;
}

// server.state_dir/models.json; by default <data home>/state/models-<port>.json, none on port 0.
std::filesystem::path state_file_of(const config& cfg) {
    if (const auto& dir = cfg.string("server.state_dir"); !dir.empty()) return std::filesystem::path(dir) / "models.json";
    const auto port = cfg.integer("server.port");
    if (port == 0) return {};
    return data_home() / "state" / ("models-" + std::to_string(port) + ".json");
}

// The main thread idles until a stop signal; meanwhile it hands freed heap pages
// back to the system now and then (server.malloc_trim_s; docs/decisions.md) and,
// when `dead` is given, watches for a dead device. Returns true when it stopped
// because the device is dead.
bool idle_until_stop(std::mutex& mutex, std::condition_variable& cv, const bool& stop_requested,
                     std::chrono::seconds trim_every, const std::function<bool()>& dead) {
    using clock = std::chrono::steady_clock;
    std::unique_lock lock(mutex);
    auto next_trim = clock::now() + trim_every;
    while (!stop_requested) {
        if (!dead && trim_every.count() == 0) {
            cv.wait(lock, [&] { return stop_requested; });
            break;
        }
        auto until = trim_every.count() == 0 ? clock::now() + k_dead_poll : next_trim;
        if (dead) until = std::min(until, clock::now() + k_dead_poll);
        if (cv.wait_until(lock, until, [&] { return stop_requested; })) break;
        if (dead && dead()) return true;
        if (trim_every.count() > 0 && clock::now() >= next_trim) {
            ::malloc_trim(0);
            next_trim = clock::now() + trim_every;
        }
    }
    return false;
}

int run_serve(const serve_options& o) {
    set_process_signals();
    std::vector<std::string> overrides = o.overrides;
    if (!o.host.empty()) overrides.push_back("server.host=" + o.host);
    if (o.port >= 0) overrides.push_back("server.port=" + std::to_string(o.port));
    if (!o.api_key.empty()) overrides.push_back("server.api_key=" + o.api_key);
    if (!o.control_socket.empty()) overrides.push_back("server.control_socket=" + o.control_socket);
    if (!o.trace.empty()) overrides.push_back("server.trace=" + o.trace);
    std::optional<std::filesystem::path> file;
    if (!o.config_file.empty()) file = o.config_file;
    auto cfg = config::load(file, overrides);
    if (!cfg) {
        std::cerr << "serve: " << cfg.error().message << "\n";
        return 2;
    }
    // Before any thread exists. glibc gives each thread its own arena; the
    // daemon allocates on one thread and frees on another (requests cross from
    // the network to the actors and back), and the freed pages stay resident in
    // every arena: RSS grew ~380 MiB/h under `soak --real` with a flat heap.
    // One arena keeps RSS flat at no measured throughput cost (docs/decisions.md).
    if (auto arenas = cfg->integer("server.malloc_arenas"); arenas > 0) ::mallopt(M_ARENA_MAX, int(arenas));
    if (auto l = init_logging(cfg->string("log.level")); !l) {
        std::cerr << "serve: " << l.error().message << "\n";
        return 2;
    }

    auto specs = model_specs(o, *cfg);
    if (!specs) {
        std::cerr << "serve: " << specs.error().message << "\n";
        return 2;
    }
    actors::engine_setup setup;
    setup.model_name = specs->front().alias;
    (specs->front().cpu ? setup.model_dir : setup.package_dir) = specs->front().dir;

    metrics::registry registry;
    actors::calserve_metrics metrics(registry);
    setup.metrics = &metrics;
    metrics.requests_waiting_limit.set(double(cfg->integer("runtime.max_queued")));
    metrics.kv_wait_limit_seconds.set(double(cfg->integer("runtime.kv_wait_ms")) / 1000.0);

    // The network has its own io_context and threads: a burst of socket work (SSE
    // writes, new requests) never queues ahead of the actors' messages on the device's
    // critical path (docs/decisions.md). Recordable: the actors run on one
    // deterministic runtime driven in real time (traces replay exactly).
    const std::string trace_path = cfg->string("server.trace");
    const bool recordable = cfg->boolean("runtime.recordable") || !trace_path.empty();
    const auto threads = std::size_t(cfg->integer("server.threads"));
    actors::runtime rt(recordable ? actors::run_mode::deterministic : actors::run_mode::threaded, threads);
    boost::asio::io_context net_io;
    std::optional<actors::realtime_driver> driver;
    if (recordable) driver.emplace(rt);

    auto header =
        actors::daemon_trace_header(*cfg, setup.package_dir.string(), setup.model_dir.string(), setup.model_name);
    std::unique_ptr<actors::trace_recorder> recorder;
    if (!trace_path.empty()) {  // before the engine exists: the trace starts with its creation
        auto r = actors::trace_recorder::open(rt, trace_path, header);
        if (!r) {
            std::cerr << "serve: cannot open the trace: " << r.error().what() << "\n";
            return 2;
        }
        recorder = std::move(r.value());
    }
    // Recordable: one alias and its generations on a generation_host behind a traced
    // engine (a replay rebuilds them from the trace). Threaded: the model router,
    // which serves one or several models and their generations.
    if (recordable && specs->size() > 1) {
        std::cerr << "serve: a recordable daemon serves one model; several need runtime.recordable=false\n";
        return 2;
    }
    std::unique_ptr<actors::generation_host> solo;
    std::unique_ptr<actors::model_router> router;
    if (recordable) {
        auto e = actors::generation_host::create(rt, *cfg, setup, actors::router_options{}.step_timeout);
        if (!e) {
            std::cerr << "serve: " << e.error().what() << "\n";
            return 2;
        }
        solo = std::move(*e);
    } else {
        actors::router_options ro;
        ro.state_file = state_file_of(*cfg);
        auto r = actors::model_router::create(rt, *cfg, *specs, &metrics, ro);
        if (!r) {
            std::cerr << "serve: " << r.error().message << "\n";
            return 2;
        }
        router = std::move(*r);
    }
    std::optional<actors::traced_engine> traced;
    if (recordable) traced.emplace(*solo, *driver, header, std::move(recorder));
    actors::engine& front = recordable ? static_cast<actors::engine&>(*traced) : *router;

    auto server_options = net::server_options::from_config(*cfg);
    server_options.client_stall = net::client_stall_hook(
        solo ? solo->faults() : router->faults(), &metrics,
        [s = solo.get(), r = router.get()](const std::string& id) -> std::optional<std::uint64_t> {
            if (!s) return r->sequence_of(id);
            for (const auto& e : s->resident())
                if (auto q = e->sequence_of(id)) return q;
            return std::nullopt;
        });
    // Outlives the server, which calls it.
    net::console_state console(
        [s = solo.get(), r = router.get()]() -> std::shared_ptr<actors::serving_engine> {
            return s ? s->any_resident() : r->primary();
        },
        &metrics);
    server_options.console_state = [&console](std::uint64_t since_job) { return console.render(since_job); };
    net::http_server server(net_io, front, metrics, std::move(server_options));
    auto port = server.start();
    if (!port) {
        std::cerr << "serve: cannot listen: " << port.error().what() << "\n";
        return 2;
    }
    std::optional<net::engine_control> control_storage;
    if (traced)
        control_storage.emplace(*traced, &metrics);
    else
        control_storage.emplace(*router, &metrics);
    net::engine_control& control = *control_storage;
    std::optional<net::control_server> control_server;
    if (auto path = cfg->string("server.control_socket"); !path.empty()) {
        control_server.emplace(net_io, control, net::control_options{path, std::nullopt});
        if (auto c = control_server->start(); !c) {
            std::cerr << "serve: cannot open the control socket: " << c.error().what() << "\n";
            server.stop();
            return 2;
        }
        spdlog::info("serve: control socket at {}", path);
    }
    std::string names;
    for (const auto& c : front.models()) names += (names.empty() ? "'" : ", '") + c.name + "'";
    std::cout << "calserve: serving " << names << " on http://" << cfg->string("server.host") << ":"
              << *port << " (" << front.card().backend << " backend" << (recordable ? ", recordable" : "") << ")"
              << std::endl;
    if (!trace_path.empty()) spdlog::info("serve: recording the trace to {}", trace_path);

    std::mutex mutex;
    std::condition_variable cv;
    bool stop_requested = false;
    boost::asio::signal_set signals(net_io, SIGINT, SIGTERM);
    // Re-armed after each signal, so a second one during the drain is said, not swallowed.
    std::function<void(boost::system::error_code, int)> on_signal = [&](boost::system::error_code ec, int sig) {
        if (ec) return;
        bool again = false;
        {
            std::lock_guard lock(mutex);
            again = stop_requested;
            stop_requested = true;
            cv.notify_all();
        }
        if (again) {
            spdlog::warn("serve: signal {} during the drain: already draining, {} requests in flight; "
                         "exiting when they finish or server.drain_timeout_ms passes",
                         sig, front.in_flight());
        } else {
            spdlog::info("serve: signal {}: draining", sig);
        }
        signals.async_wait(on_signal);
    };
    signals.async_wait(on_signal);
    boost::asio::signal_set hangups(net_io, SIGHUP);
    on_hangup(hangups);
    std::vector<std::thread> net_threads;
    std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> net_work;
    if (recordable) driver->start();
    else rt.start();
    net_work.emplace(net_io.get_executor());
    for (std::size_t i = 0; i < threads; ++i) net_threads.emplace_back([&] { net_io.run(); });
    std::function<bool()> dead;
    if (cfg->boolean("device.dead_exit"))
        dead = [&] {
            auto e = solo ? solo->current() : router->primary();
            return e && e->device_state() == actors::device_health::dead;
        };
    const bool device_dead =
        idle_until_stop(mutex, cv, stop_requested, std::chrono::seconds(cfg->integer("server.malloc_trim_s")), dead);
    if (device_dead)
        spdlog::error("serve: the device is dead and device.dead_exit is set: exiting with code {}", k_exit_device_dead);
    server.drain();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(cfg->integer("server.drain_timeout_ms"));
    while (front.in_flight() > 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto left = front.in_flight();
    if (left > 0) spdlog::warn("serve: drain timeout with {} requests in flight", left);
    if (control_server) control_server->stop();
    // Streams still running end with an error event (503 "server shutting down") and
    // their proper end, so clients can tell the shutdown from a network failure.
    server.stop(k_stop_grace);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let closing sockets flush
    if (recordable && !trace_path.empty()) {
        if (auto t = traced->stop_trace(); t) spdlog::info("serve: trace {}", *t);
    }
    net_work.reset();
    net_io.stop();
    for (auto& t : net_threads) t.join();
    if (recordable) {
        traced.reset();
        driver->stop();
    } else {
        rt.stop();
    }
    solo.reset();
    router.reset();
    spdlog::info("serve: stopped");
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
}  // namespace calserve::tools
