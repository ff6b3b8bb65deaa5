// `calserve serve`'s running daemon, step by step (serve_daemon.hpp): engines, servers,
// signal handlers, the idle main thread, the drain. The network has its own io_context
// and threads: a burst of socket work (SSE writes, new requests) never queues ahead of
// the actors' messages on the device's critical path (docs/decisions.md).
#include "tools/serve_daemon.hpp"

#include <csignal>
#include <iostream>
#include <malloc.h>
#include <spdlog/spdlog.h>

#include "actors/device_actor.hpp"
#include "tools/data_paths.hpp"

namespace calserve::tools {
namespace {
// How long streams cut by the end of the drain get to write their last error event.
constexpr std::chrono::milliseconds k_stop_grace{2000};
// How often the idle main thread looks at the device when device.dead_exit is set.
constexpr auto k_dead_poll = std::chrono::milliseconds(200);

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

}  // namespace

serve_daemon::serve_daemon(const config& cfg, const std::vector<engine::model_spec>& specs)
    : cfg_(cfg),
      specs_(specs),
      metrics_(registry_),
      trace_path_(cfg.string("server.trace")),
      recordable_(cfg.boolean("runtime.recordable") || !trace_path_.empty()),
      threads_(std::size_t(cfg.integer("server.threads"))),
      // Recordable: the actors run on one deterministic runtime driven in real time
      // (traces replay exactly).
      rt_(recordable_ ? actors::run_mode::deterministic : actors::run_mode::threaded, threads_) {
    setup_.model_name = specs.front().alias;
    (specs.front().cpu ? setup_.model_dir : setup_.package_dir) = specs.front().dir;
    setup_.metrics = &metrics_;
    metrics_.requests_waiting_limit.set(double(cfg.integer("runtime.max_queued")));
    metrics_.kv_wait_limit_seconds.set(double(cfg.integer("runtime.kv_wait_ms")) / 1000.0);
    if (recordable_) driver_.emplace(rt_);
}

bool serve_daemon::build_engines() {
    header_ = engine::daemon_trace_header(cfg_, setup_.package_dir.string(), setup_.model_dir.string(), setup_.model_name);
    if (!trace_path_.empty()) {  // before the engine exists: the trace starts with its creation
        auto r = engine::trace_recorder::open(rt_, trace_path_, header_);
        if (!r) {
            std::cerr << "serve: cannot open the trace: " << r.error().what() << "\n";
            return false;
        }
        recorder_ = std::move(r.value());
    }
    // Recordable: one alias and its generations on a generation_host behind a traced
    // engine (a replay rebuilds them from the trace). Threaded: the model router,
    // which serves one or several models and their generations.
    if (recordable_ && specs_.size() > 1) {
        std::cerr << "serve: a recordable daemon serves one model; several need runtime.recordable=false\n";
        return false;
    }
    if (recordable_) {
        auto e = engine::generation_host::create(rt_, cfg_, setup_, engine::router_options{}.step_timeout);
        if (!e) {
            std::cerr << "serve: " << e.error().what() << "\n";
            return false;
        }
        solo_ = std::move(*e);
    } else {
        engine::router_options ro;
        ro.state_file = state_file_of(cfg_);
        auto r = engine::model_router::create(rt_, cfg_, specs_, &metrics_, ro);
        if (!r) {
            std::cerr << "serve: " << r.error().message << "\n";
            return false;
        }
        router_ = std::move(*r);
    }
    if (recordable_) traced_.emplace(*solo_, *driver_, header_, std::move(recorder_));
    front_ = recordable_ ? static_cast<actors::engine*>(&*traced_) : router_.get();
    return true;
}

bool serve_daemon::start_http() {
    auto server_options = net::server_options::from_config(cfg_);
    server_options.client_stall = net::client_stall_hook(
        solo_ ? solo_->faults() : router_->faults(), &metrics_,
        [s = solo_.get(), r = router_.get()](const std::string& id) -> std::optional<std::uint64_t> {
            if (!s) return r->sequence_of(id);
            for (const auto& e : s->resident())
                if (auto q = e->sequence_of(id)) return q;
            return std::nullopt;
        });
    console_.emplace(
        [s = solo_.get(), r = router_.get()]() -> std::shared_ptr<engine::serving_engine> {
            return s ? s->any_resident() : r->primary();
        },
        &metrics_);
    server_options.console_state = [&console = *console_](std::uint64_t since_job) { return console.render(since_job); };
    server_.emplace(net_io_, *front_, metrics_, std::move(server_options));
    auto port = server_->start();
    if (!port) {
        std::cerr << "serve: cannot listen: " << port.error().what() << "\n";
        return false;
    }
    port_ = *port;
    return true;
}

bool serve_daemon::start_control() {
    if (traced_)
        control_.emplace(*traced_, &metrics_);
    else
        control_.emplace(*router_, &metrics_);
    if (auto path = cfg_.string("server.control_socket"); !path.empty()) {
        control_server_.emplace(net_io_, *control_, net::control_options{path, std::nullopt});
        if (auto c = control_server_->start(); !c) {
            std::cerr << "serve: cannot open the control socket: " << c.error().what() << "\n";
            server_->stop();
            return false;
        }
        spdlog::info("serve: control socket at {}", path);
    }
    return true;
}

void serve_daemon::announce() const {
    std::string names;
    for (const auto& c : front_->models()) names += (names.empty() ? "'" : ", '") + c.name + "'";
    std::cout << "calserve: serving " << names << " on http://" << cfg_.string("server.host") << ":"
              << port_ << " (" << front_->card().backend << " backend" << (recordable_ ? ", recordable" : "") << ")"
              << std::endl;
    if (!trace_path_.empty()) spdlog::info("serve: recording the trace to {}", trace_path_);
}

void serve_daemon::arm_signals() {
    signals_.emplace(net_io_, SIGINT, SIGTERM);
    // Re-armed after each signal, so a second one during the drain is said, not swallowed.
    on_signal_ = [this](boost::system::error_code ec, int sig) {
        if (ec) return;
        bool again = false;
        {
            std::lock_guard lock(mutex_);
            again = stop_requested_;
            stop_requested_ = true;
            cv_.notify_all();
        }
        if (again) {
            spdlog::warn("serve: signal {} during the drain: already draining, {} requests in flight; "
                         "exiting when they finish or server.drain_timeout_ms passes",
                         sig, front_->in_flight());
        } else {
            spdlog::info("serve: signal {}: draining", sig);
        }
        signals_->async_wait(on_signal_);
    };
    signals_->async_wait(on_signal_);
    hangups_.emplace(net_io_, SIGHUP);
    on_hangup(*hangups_);
}

bool serve_daemon::run_until_stop() {
    arm_signals();
    if (recordable_) driver_->start();
    else rt_.start();
    net_work_.emplace(net_io_.get_executor());
    for (std::size_t i = 0; i < threads_; ++i) net_threads_.emplace_back([this] { net_io_.run(); });
    std::function<bool()> dead;
    if (cfg_.boolean("device.dead_exit"))
        dead = [this] {
            auto e = solo_ ? solo_->current() : router_->primary();
            return e && e->device_state() == actors::device_health::dead;
        };
    return idle_until_stop(mutex_, cv_, stop_requested_, std::chrono::seconds(cfg_.integer("server.malloc_trim_s")), dead);
}

void serve_daemon::drain_and_stop() {
    server_->drain();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(cfg_.integer("server.drain_timeout_ms"));
    while (front_->in_flight() > 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto left = front_->in_flight();
    if (left > 0) spdlog::warn("serve: drain timeout with {} requests in flight", left);
    if (control_server_) control_server_->stop();
    // Streams still running end with an error event (503 "server shutting down") and
    // their proper end, so clients can tell the shutdown from a network failure.
    server_->stop(k_stop_grace);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let closing sockets flush
    if (recordable_ && !trace_path_.empty()) {
        if (auto t = traced_->stop_trace(); t) spdlog::info("serve: trace {}", *t);
    }
    net_work_.reset();
    net_io_.stop();
    for (auto& t : net_threads_) t.join();
    if (recordable_) {
        traced_.reset();
        driver_->stop();
    } else {
        rt_.stop();
    }
    solo_.reset();
    router_.reset();
    spdlog::info("serve: stopped");
}

}  // namespace calserve::tools
