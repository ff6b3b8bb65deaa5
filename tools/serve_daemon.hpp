#pragma once
//! The running daemon of `calserve serve`. tools/cmd_serve.cpp reads the command line
//! and the configuration, then takes one serve_daemon through its steps:
//!
//!   serve_daemon(cfg, specs)   metrics, the actors' runtime, the network's io_context
//!   build_engines()            trace recorder; the model router, or (recordable) one
//!                              generation host behind a traced engine
//!   start_http()               HTTP server and web console
//!   start_control()            control socket (server.control_socket)
//!   announce()                 the "calserve: serving ..." line
//!   run_until_stop()           signal handlers, actor and network threads, then the
//!                              main thread idles until SIGINT/SIGTERM (or a dead device)
//!   drain_and_stop()           in-flight requests get server.drain_timeout_ms; servers,
//!                              threads and engines stop
//!
//! Fault model: a start-up step that fails says why on stderr and returns false (the
//! command exits 2); what was built so far is destroyed in reverse order.
//! Invariant: members are declared in start-up order, so they are destroyed in reverse:
//! the signal handlers before the servers, the servers before the web console they
//! call, the engines before the runtime they run on.
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/runtime/realtime_driver.hpp"
#include "config/config.hpp"
#include "engine/generation_host.hpp"
#include "engine/model_router.hpp"
#include "engine/serving_engine.hpp"
#include "engine/traced_engine.hpp"
#include "metrics/metrics.hpp"
#include "net/console/console_state.hpp"
#include "net/control_socket.hpp"
#include "net/engine_control.hpp"
#include "net/http_server.hpp"

namespace calserve::tools {

class serve_daemon {
public:
    // `cfg` and `specs` (the models to serve, the first one primary) outlive the daemon.
    serve_daemon(const config& cfg, const std::vector<engine::model_spec>& specs);

    [[nodiscard]] bool build_engines();
    [[nodiscard]] bool start_http();
    [[nodiscard]] bool start_control();
    void announce() const;
    // True when it stopped because the device is dead (device.dead_exit set).
    bool run_until_stop();
    void drain_and_stop();

private:
    void arm_signals();

    const config& cfg_;
    const std::vector<engine::model_spec>& specs_;
    engine::engine_setup setup_;
    metrics::registry registry_;
    metrics::calserve_metrics metrics_;
    const std::string trace_path_;
    const bool recordable_;                        // actors on one deterministic runtime
    const std::size_t threads_;                    // actor threads, and network threads
    actors::runtime rt_;
    boost::asio::io_context net_io_;               // the network's own, beside the actors'
    std::optional<actors::realtime_driver> driver_;  // recordable only
    io::trace_header header_;
    std::unique_ptr<engine::trace_recorder> recorder_;  // until the traced engine takes it
    std::unique_ptr<engine::generation_host> solo_;     // recordable: one alias
    std::unique_ptr<engine::model_router> router_;      // threaded: every alias
    std::optional<engine::traced_engine> traced_;
    actors::engine* front_ = nullptr;                   // traced_ or router_
    std::optional<net::console_state> console_;         // outlives the server, which calls it
    std::optional<net::http_server> server_;
    std::uint16_t port_ = 0;
    std::optional<net::engine_control> control_;
    std::optional<net::control_server> control_server_;
    std::mutex mutex_;
    std::condition_variable cv_;
    bool stop_requested_ = false;                       // guarded by mutex_
    std::optional<boost::asio::signal_set> signals_;    // SIGINT, SIGTERM
    std::function<void(boost::system::error_code, int)> on_signal_;
    std::optional<boost::asio::signal_set> hangups_;    // SIGHUP
    std::vector<std::thread> net_threads_;
    std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> net_work_;
};

}  // namespace calserve::tools
