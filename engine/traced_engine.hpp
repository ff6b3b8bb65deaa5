#pragma once
//! traced_engine: the daemon's engine when its run must be reproducible.
//!
//! Wraps a generation_host (one alias' generations, each a serving_engine) whose
//! runtime is deterministic and driven in real time by a realtime_driver. Every
//! call that changes what the actors do — submit, cancel, drain, resume, fault
//! arm/clear, device reset, model load/rollback/unload — is handed to
//! the driver thread and, while a trace is on, recorded there as a trace input
//! stamped with the virtual time at which it was applied. The runtime's
//! delivery hook records every actor message, and each request's outcome as
//! the daemon measured it on its steady clock (io::trace_done: the "recorded"
//! side of a what-if replay, docs/twin.md). `calserve replay` re-applies the
//! inputs at those times on a fresh deterministic runtime and gets the same
//! message stream (docs/trace.md).
//!
//! Fault model: a trace file that cannot be opened is an error of
//! `start_trace`, never of a request; a writer that falls behind drops and
//! counts records (reported by `stop_trace` and in the trace's end record).
//! Read-only calls (card, health, tokenizer, in_flight, model list) go straight
//! to the serving generation's engine: they read thread-safe state and change nothing.
//! Invariants: recorder state is touched only on the driver thread; a trace
//! started after start-up begins on an idle engine (nothing in flight), so a
//! fresh engine can take the run from there.
#include <memory>
#include <string>

#include "engine/text_forwarding_engine.hpp"
#include "io/trace.hpp"

namespace calserve {
class config;
}
namespace calserve::device {
struct fault_spec;
class fault_registry;
}
namespace calserve::io {
class trace_writer;
}

namespace calserve::actors {
class realtime_driver;
class runtime;
}  // namespace calserve::actors

namespace calserve::engine {

class serving_engine;
class generation_host;
struct load_request;
struct generation_info;

// Appends one run's records to a trace file; installs itself as the runtime's
// delivery hook. Driver thread only (or before the driver starts).
class trace_recorder {
public:
    static result<std::unique_ptr<trace_recorder>> open(actors::runtime& rt, const std::string& path,
                                                        const io::trace_header& header);
    ~trace_recorder();
    void record(const io::trace_record& record);
    // Records the registry's fault firings too (until close).
    void attach_faults(std::shared_ptr<device::fault_registry> faults);
    // Removes the hooks, writes the end record, closes the file.
    result<io::trace_end> close();
    const std::string& path() const { return path_; }

private:
    trace_recorder(actors::runtime& rt, std::string path, std::unique_ptr<io::trace_writer> writer);
    actors::runtime& rt_;
    std::string path_;
    std::unique_ptr<io::trace_writer> writer_;
    std::shared_ptr<device::fault_registry> faults_;
    std::uint64_t messages_ = 0;
    bool closed_ = false;
};

// The header of a daemon trace: what a replay needs to rebuild the engine.
// `alias` names the served model ("ALIAS=DIR" in `packages` when it is a package).
io::trace_header daemon_trace_header(const config& cfg, const std::string& package_dir, const std::string& model_dir,
                                     const std::string& alias = "");

class traced_engine final : public text_forwarding_engine {
public:
    // `recorder` may be null (recordable, no trace yet) or a trace opened before the engine was built.
    traced_engine(generation_host& host, actors::realtime_driver& driver, io::trace_header header,
                  std::unique_ptr<trace_recorder> recorder);
    ~traced_engine() override;

    void_result submit(actors::generation_request request, std::shared_ptr<actors::generation_sink> sink) override;
    void cancel(const std::string& request_id) override;
    const actors::model_card& card() const override;
    actors::engine_health health() const override;
    void drain() override;
    void resume() override;
    std::int64_t in_flight() const override;

    // Operator commands, applied and recorded on the driver thread.
    result<std::uint64_t> arm_fault(const device::fault_spec& spec);
    result<std::size_t> clear_faults(const std::optional<std::string>& point, std::optional<std::uint64_t> id);
    void reset_device();
    // Generations (docs/generations.md), applied and recorded on the driver thread.
    result<std::uint64_t> model_load(const load_request& request);
    result<std::uint64_t> model_rollback(const std::string& alias);
    void_result model_unload(const std::string& alias);
    std::vector<generation_info> model_list() const;

    // Tracing. start: fails if a trace is on, the file cannot be created, or requests are in flight.
    void_result start_trace(const std::string& path);
    // Stops the trace; returns its summary ("<path>: N messages, D dropped").
    result<std::string> stop_trace();

    // The serving generation's engine (else any resident one); null when none is resident.
    std::shared_ptr<serving_engine> inner() const;
    std::shared_ptr<device::fault_registry> faults() const;
    generation_host& host() { return host_; }

private:
    std::shared_ptr<const actors::engine> text_engine() const override;
    void record(const io::trace_record& r);  // driver thread

    generation_host& host_;
    actors::realtime_driver& driver_;
    io::trace_header header_;
    // Driver thread only. Shared so that a request's outcome record goes to the trace that
    // was on when it was submitted, and to none once that trace is closed.
    std::shared_ptr<trace_recorder> recorder_;
};

}  // namespace calserve::engine
