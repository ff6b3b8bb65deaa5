#include "engine/traced_engine.hpp"

#include <charconv>
#include <chrono>
#include <spdlog/spdlog.h>

#include "actors/runtime/realtime_driver.hpp"
#include "actors/device_actor.hpp"
#include "engine/generation_host.hpp"
#include "engine/serving_engine.hpp"
#include "config/config.hpp"
#include "device/fault_points.hpp"
#include "io/trace_writer.hpp"

namespace calserve::engine {

// ---- trace_recorder ----

trace_recorder::trace_recorder(actors::runtime& rt, std::string path, std::unique_ptr<io::trace_writer> writer)
    : rt_(rt), path_(std::move(path)), writer_(std::move(writer)) {}

result<std::unique_ptr<trace_recorder>> trace_recorder::open(actors::runtime& rt, const std::string& path,
                                                             const io::trace_header& header) {
    auto w = io::trace_writer::open(path);
    if (!w) return w.error();
    std::unique_ptr<trace_recorder> r(new trace_recorder(rt, path, std::move(w.value())));
    r->record(header);
    trace_recorder* self = r.get();
    rt.set_delivery_hook([self](const actors::delivery& d) {
        ++self->messages_;
        self->writer_->push(io::encode(io::trace_message{d.sequence, d.time.count(), d.from.value, d.to.value,
                                                         std::string(d.from_name), std::string(d.to_name),
                                                         std::string(d.type)}));
    });
    return r;
}

trace_recorder::~trace_recorder() { (void)close(); }

void trace_recorder::record(const io::trace_record& record) {
    if (!closed_) writer_->push(io::encode(record));
}

void trace_recorder::attach_faults(std::shared_ptr<device::fault_registry> faults) {
    faults_ = std::move(faults);
    faults_->set_fire_observer([this](const device::fault_fire& f) {
        record(io::trace_fire{rt_.now().count(), std::string(device::to_string(f.point)), f.arm_id});
    });
}

result<io::trace_end> trace_recorder::close() {
    if (closed_) return make_error(status::invalid_argument, "trace already closed");
    rt_.set_delivery_hook({});
    if (faults_) faults_->set_fire_observer({});
    io::trace_end end{rt_.now().count(), messages_, writer_->dropped()};
    writer_->push(io::encode(end));
    closed_ = true;
    if (auto c = writer_->close(); !c) return c.error();
    end.dropped = writer_->dropped();
    return end;
}

// ---- header ----

io::trace_header daemon_trace_header(const config& cfg, const std::string& package_dir, const std::string& model_dir,
                                     const std::string& alias) {
    io::trace_header h;
    h.source = "daemon";
    h.package_dir = package_dir;
    h.model_dir = model_dir;
    if (!package_dir.empty()) {
        std::error_code ec;
        auto abs = std::filesystem::absolute(package_dir, ec);
        h.packages.push_back(alias + "=" + (ec ? package_dir : abs.string()));
    }
    // Everything that shapes the engine; not server.* (listen address, keys) nor log.*.
    for (const auto& key : config_schema()) {
        std::string_view path = key.path;
        if (path.starts_with("server.") || path.starts_with("log.") || is_pattern(key)) continue;
        std::string value;
        switch (key.type) {
            case value_type::integer: value = std::to_string(cfg.integer(path)); break;
            case value_type::number: {
                char buf[64];
                auto [end, ec] = std::to_chars(buf, buf + sizeof buf, cfg.number(path));  // shortest round trip
                value.assign(buf, ec == std::errc() ? end : buf);
                break;
            }
            case value_type::boolean: value = cfg.boolean(path) ? "true" : "false"; break;
            case value_type::string: value = cfg.string(path); break;
        }
        h.overrides.push_back(std::string(path) + "=" + value);
    }
    return h;
}

// ---- traced_engine ----

namespace {

io::trace_submit to_trace(const actors::generation_request& r, std::int64_t t_ns) {
    io::trace_submit s;
    s.t_ns = t_ns;
    s.id = r.id;
    s.prompt = r.prompt;
    s.max_tokens = r.max_tokens;
    const auto& p = r.sampling;
    s.temperature = p.temperature;
    s.top_p = p.top_p;
    s.top_k = p.top_k;
    s.seed = p.seed;
    s.ignore_eos = r.ignore_eos;
    s.cache_salt = r.cache_salt;
    s.timeout_ms = r.timeout.count();
    s.min_p = p.min_p;
    s.presence_penalty = p.presence_penalty;
    s.frequency_penalty = p.frequency_penalty;
    s.repetition_penalty = p.repetition_penalty;
    for (const auto& [tok, bias] : p.logit_bias) s.logit_bias.emplace_back(tok, bias);
    s.logprobs = p.logprobs;
    s.top_logprobs = p.top_logprobs;
    s.stop = r.stop;
    s.stop_token_ids = r.stop_token_ids;
    // The constraint as text: replay compiles it again, so it rebuilds the same masks.
    s.grammar_kind = static_cast<std::int32_t>(r.constraint.kind);
    s.grammar = r.constraint.grammar;
    s.thinking = r.constraint.thinking;
    s.max_reasoning_tokens = r.constraint.max_reasoning_tokens;
    return s;
}

io::trace_arm to_trace(const device::fault_spec& f, std::int64_t t_ns) {
    io::trace_arm a;
    a.t_ns = t_ns;
    a.point = std::string(device::to_string(f.point));
    a.mode = std::string(device::to_string(f.mode));
    a.count = f.count;
    a.probability = f.probability;
    a.seed = f.seed;
    a.delay_ms = f.delay_ms;
    a.chip = f.match.chip;
    a.submodel = f.match.submodel;
    a.request = f.match.request;
    a.sequence = f.match.sequence;
    return a;
}

// Wraps a request's sink while a trace is on: measures its first token and finish on
// the daemon's steady clock from the moment the driver applied the submit, and records
// the outcome with how far that moment was past the submit's virtual stamp on the
// driver's wall-clock mapping (0 unless virtual time lagged the wall clock).
// Sinks run on the driver thread here (deterministic runtime), as the recorder must.
struct timed_sink final : actors::generation_sink {
    using clock = std::chrono::steady_clock;
    std::shared_ptr<actors::generation_sink> inner;
    std::weak_ptr<trace_recorder> recorder;
    const actors::runtime* rt = nullptr;
    std::string id;
    clock::time_point start;
    std::int64_t ttft_ns = -1, apply_lag_ns = 0;

    void on_token(const actors::generated_token& token) override {
        if (ttft_ns < 0) ttft_ns = (clock::now() - start).count();
        inner->on_token(token);
    }
    void on_finish(const actors::generation_result& r) override {
        const std::int64_t e2e_ns = (clock::now() - start).count();
        if (auto rec = recorder.lock())
            rec->record(io::trace_done{rt->now().count(), id, to_string(r.reason), r.tokens.completion_tokens, ttft_ns,
                                       e2e_ns, apply_lag_ns});
        inner->on_finish(r);
    }
};

}  // namespace

traced_engine::traced_engine(generation_host& host, actors::realtime_driver& driver, io::trace_header header,
                             std::unique_ptr<trace_recorder> recorder)
    : host_(host), driver_(driver), header_(std::move(header)), recorder_(std::move(recorder)) {
    if (recorder_) recorder_->attach_faults(host_.faults());
}

std::shared_ptr<serving_engine> traced_engine::inner() const { return host_.any_resident(); }
std::shared_ptr<device::fault_registry> traced_engine::faults() const { return host_.faults(); }

traced_engine::~traced_engine() {
    driver_.call([this] {
        if (recorder_) (void)recorder_->close();
        recorder_.reset();
    });
}

void traced_engine::record(const io::trace_record& r) {
    if (recorder_) recorder_->record(r);
}

void_result traced_engine::submit(actors::generation_request request, std::shared_ptr<actors::generation_sink> sink) {
    return driver_.call([&]() -> void_result {
        if (!recorder_) return host_.submit(std::move(request), std::move(sink));
        record(to_trace(request, driver_.rt().now().count()));
        auto timed = std::make_shared<timed_sink>();
        timed->inner = std::move(sink);
        timed->recorder = recorder_;
        timed->rt = &driver_.rt();
        timed->id = request.id;
        timed->start = timed_sink::clock::now();
        timed->apply_lag_ns = (timed->start - driver_.wall_time_of(driver_.rt().now())).count();
        return host_.submit(std::move(request), std::move(timed));
    });
}

void traced_engine::cancel(const std::string& request_id) {
    driver_.post([this, request_id] {
        record(io::trace_cancel{driver_.rt().now().count(), request_id});
        host_.cancel(request_id);
    });
}

// The tokenizer side reads the serving generation (else any resident one): the
// generations of one alias share the tokenizer and chat template.
std::shared_ptr<const actors::engine> traced_engine::text_engine() const { return inner(); }

const actors::model_card& traced_engine::card() const { return host_.card(); }
actors::engine_health traced_engine::health() const {
    auto e = host_.current();
    if (!e) return actors::engine_health{false, true, "unloaded", 0, 0};
    return e->health();
}
std::int64_t traced_engine::in_flight() const { return host_.in_flight(); }

void traced_engine::drain() {
    driver_.call([this] {
        record(io::trace_control{driver_.rt().now().count(), "drain"});
        host_.drain();
    });
}

void traced_engine::resume() {
    driver_.call([this] {
        record(io::trace_control{driver_.rt().now().count(), "resume"});
        host_.resume();
    });
}

result<std::uint64_t> traced_engine::arm_fault(const device::fault_spec& spec) {
    return driver_.call([&]() -> result<std::uint64_t> {
        auto id = host_.faults()->arm(spec);
        if (id) record(to_trace(spec, driver_.rt().now().count()));
        return id;
    });
}

result<std::size_t> traced_engine::clear_faults(const std::optional<std::string>& point, std::optional<std::uint64_t> id) {
    return driver_.call([&]() -> result<std::size_t> {
        auto& reg = *host_.faults();
        result<std::size_t> n = std::size_t(0);
        if (id) {
            n = reg.clear_id(*id);
        } else if (point) {
            auto p = device::parse_fault_point(*point);
            if (!p) return make_error(status::invalid_argument, "unknown fault point: " + *point);
            n = reg.clear(*p);
        } else {
            n = reg.clear();
        }
        if (n) record(io::trace_clear{driver_.rt().now().count(), point, id});
        return n;
    });
}

void traced_engine::reset_device() {
    driver_.call([this] {
        record(io::trace_control{driver_.rt().now().count(), "reset"});
        if (auto e = inner()) e->reset_device("control socket");
    });
}

// An operation is recorded once applied and accepted: a refusal changes nothing
// (and a refused load's directory need not exist when the trace is replayed).
result<std::uint64_t> traced_engine::model_load(const load_request& request) {
    return driver_.call([&]() -> result<std::uint64_t> {
        auto n = host_.load(request);
        if (n) {
            std::error_code ec;
            auto dir = std::filesystem::absolute(request.dir, ec);
            record(io::trace_model{driver_.rt().now().count(), "load", request.alias, ec ? request.dir.string() : dir.string(),
                                   request.keep, request.replace});
        }
        return n;
    });
}

result<std::uint64_t> traced_engine::model_rollback(const std::string& alias) {
    return driver_.call([&]() -> result<std::uint64_t> {
        auto n = host_.rollback(alias);
        if (n) record(io::trace_model{driver_.rt().now().count(), "rollback", alias, "", false, false});
        return n;
    });
}

void_result traced_engine::model_unload(const std::string& alias) {
    return driver_.call([&]() -> void_result {
        auto r = host_.unload(alias);
        if (r) record(io::trace_model{driver_.rt().now().count(), "unload", alias, "", false, false});
        return r;
    });
}

std::vector<generation_info> traced_engine::model_list() const { return host_.list(); }

void_result traced_engine::start_trace(const std::string& path) {
    // The prefix cache is state that outlives requests: a window starts with it empty, as
    // a replay's fresh engine does. Its own inbox item, so the frees it sends to the device
    // are delivered (the driver runs until idle after each item) before recording starts.
    driver_.call([&] {
        if (recorder_) return;
        if (auto inner = host_.current()) inner->clear_prefix_cache();
    });
    return driver_.call([&]() -> void_result {
        if (recorder_) return make_error(status::invalid_argument, "a trace is already being recorded to " + recorder_->path());
        if (auto n = host_.in_flight(); n > 0)
            return make_error(status::not_ready, "trace.start needs an idle engine (" + std::to_string(n) +
                                                     " requests in flight): drain, wait, start, resume");
        // A replay starts from a fresh engine: state that outlives requests must be fresh too.
        if (host_.faults()->any_armed())
            return make_error(status::not_ready, "trace.start needs no armed faults: fault clear, then start");
        // ... and from the daemon's first generation, alone.
        if (host_.has_history())
            return make_error(status::not_ready, "trace.start needs the daemon's first generation alone (a model load "
                                                 "happened): record with --trace from the start instead");
        auto inner = host_.current();
        if (!inner) return make_error(status::not_ready, "trace.start needs a serving model");
        if (auto h = inner->device_state(); h != device::device_health::ready && h != device::device_health::busy)
            return make_error(status::not_ready, "trace.start needs a ready device");
        auto h = header_;
        h.from_start = false;
        h.engine_seq = inner->sequence_counter();
        auto r = trace_recorder::open(driver_.rt(), path, h);
        if (!r) return r.error();
        recorder_ = std::move(r.value());
        recorder_->attach_faults(host_.faults());
        spdlog::info("trace: recording to {}", path);
        return {};
    });
}

result<std::string> traced_engine::stop_trace() {
    return driver_.call([&]() -> result<std::string> {
        if (!recorder_) return make_error(status::invalid_argument, "no trace is being recorded");
        auto path = recorder_->path();
        auto end = recorder_->close();
        recorder_.reset();
        if (!end) return end.error();
        spdlog::info("trace: {} closed ({} messages, {} dropped)", path, end->messages, end->dropped);
        return path + ": " + std::to_string(end->messages) + " messages, " + std::to_string(end->dropped) + " dropped";
    });
}

}  // namespace calserve::engine
