#include "net/engine_control.hpp"

#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "config/json_text.hpp"
#include "actors/device_actor.hpp"
#include "metrics/metrics.hpp"
#include "device/fault_points.hpp"

namespace calserve::net {

using actors::device_health;

namespace {

fault_arm_request to_request(const device::armed_fault& a) {
    fault_arm_request r;
    r.point = std::string(device::to_string(a.spec.point));
    r.mode = std::string(device::to_string(a.spec.mode));
    r.count = a.spec.count;
    r.probability = a.spec.probability;
    r.seed = a.spec.seed;
    r.delay_ms = a.spec.delay_ms;
    r.chip = a.spec.match.chip;
    r.submodel = a.spec.match.submodel;
    r.request = a.spec.match.request;
    r.sequence = a.spec.match.sequence;
    return r;
}

}  // namespace

std::function<std::optional<double>(const std::string&)> client_stall_hook(
    std::shared_ptr<device::fault_registry> faults, metrics::calserve_metrics* metrics,
    std::function<std::optional<std::uint64_t>(const std::string&)> sequence_of) {
    faults->add_consumer(device::fault_point::client_stall);
    return [faults, metrics, sequence_of = std::move(sequence_of)](const std::string& id) -> std::optional<double> {
        if (!faults->any_armed()) return std::nullopt;
        device::fault_site site;
        if (sequence_of) site.sequence = sequence_of(id);
        auto fire = faults->check(device::fault_point::client_stall, site);
        if (!fire) return std::nullopt;
        if (metrics) metrics->faults_total.labels({device::to_string(device::fault_point::client_stall)}).inc();
        return fire->delay_ms;
    };
}

result<std::uint64_t> engine_control::fault_arm(const fault_arm_request& request) {
    auto spec = device::make_fault_spec(request.point, request.mode, request.count, request.probability, request.seed,
                                        request.delay_ms,
                                        {request.chip, request.submodel, request.sequence, request.request});
    if (!spec) return spec.error();
    auto id = traced_ ? traced_->arm_fault(*spec) : faults()->arm(std::move(*spec));
    if (id) spdlog::info("control: armed fault {} ({}) as #{}", request.point, request.mode, *id);
    return id;
}

result<std::size_t> engine_control::fault_clear(const fault_clear_request& request) {
    if (traced_) return traced_->clear_faults(request.point, request.id);
    auto& reg = *faults();
    if (request.id) return reg.clear_id(*request.id);
    if (request.point) {
        auto point = device::parse_fault_point(*request.point);
        if (!point) return make_error(status::invalid_argument, "unknown fault point: " + *request.point);
        return reg.clear(*point);
    }
    return reg.clear();
}

std::vector<fault_entry> engine_control::fault_list() {
    std::vector<fault_entry> out;
    for (const auto& a : faults()->list()) {
        fault_entry e;
        e.id = a.id;
        e.spec = to_request(a);
        e.remaining = a.remaining;
        e.fires = a.fires;
        out.push_back(std::move(e));
    }
    return out;
}

void_result engine_control::device_reset() {
    // Also from dead: the operator cleared the cause and asks for a fresh recovery.
    if (traced_) {
        traced_->reset_device();
        return {};
    }
    auto e = engine();
    if (!e) return make_error(status::not_ready, "no model is serving");
    e->reset_device("control socket");
    return {};
}

void_result engine_control::cache_clear() {
    // A recorded run's cache state is part of the run: only inputs the trace records may change it.
    if (traced_) return make_error(status::unsupported, "cache.clear is not recorded in traces: not on a recordable daemon");
    auto e = engine();
    if (!e) return make_error(status::not_ready, "no model is serving");
    e->clear_prefix_cache();
    return {};
}

void_result engine_control::drain() {
    if (traced_)
        traced_->drain();
    else if (router_)
        router_->drain();
    else
        engine_->drain();
    return {};
}

void_result engine_control::resume() {
    if (traced_)
        traced_->resume();
    else if (router_)
        router_->resume();
    else
        engine_->resume();
    return {};
}

result<std::string> engine_control::stats() {
    namespace json = boost::json;
    auto e = engine();
    if (!e) return make_error(status::not_ready, "no model is serving");
    auto h = router_ ? router_->health() : traced_ ? traced_->health() : e->health();
    const auto in_flight = router_ ? router_->in_flight() : traced_ ? traced_->in_flight() : e->in_flight();
    json::object o{{"device_state", h.device_state}, {"ready", h.ready},           {"healthy", h.healthy},
                   {"in_flight", in_flight}, {"waiting", h.waiting}, {"device_resets", e->device_resets()}};
    json::object fires;
    auto& reg = *faults();
    for (auto p : device::all_fault_points) fires[device::to_string(p)] = reg.fires(p);
    o["fault_fires"] = std::move(fires);
    if (metrics_) {
        o["kv_blocks_used"] = metrics_->kv_blocks_used.value();
        o["kv_blocks_total"] = metrics_->kv_blocks_capacity.value();
        o["requests_recovered"] = metrics_->requests_recovered.value();
    }
    return json_text(o);
}

std::shared_ptr<engine::serving_engine> engine_control::engine() const {
    if (router_) return router_->primary();
    if (traced_) return traced_->inner();
    return std::shared_ptr<engine::serving_engine>(std::shared_ptr<engine::serving_engine>{}, engine_);
}

std::shared_ptr<device::fault_registry> engine_control::faults() const {
    if (traced_) return traced_->faults();
    return router_ ? router_->faults() : engine_->faults();
}

namespace {
const char* const k_no_generations = "this engine serves one model and manages no generations";
}

result<std::uint64_t> engine_control::model_load(const std::string& alias, const std::string& dir, bool replace,
                                                 bool keep) {
    engine::load_request r{alias, dir, replace, keep};
    if (traced_) return traced_->model_load(r);
    if (!router_) return make_error(status::unsupported, k_no_generations);
    return router_->load(r);
}

result<std::uint64_t> engine_control::model_rollback(const std::string& alias) {
    if (traced_) return traced_->model_rollback(alias);
    if (!router_) return make_error(status::unsupported, k_no_generations);
    return router_->rollback(alias);
}

void_result engine_control::model_unload(const std::string& alias) {
    if (traced_) return traced_->model_unload(alias);
    if (!router_) return make_error(status::unsupported, k_no_generations);
    return router_->unload(alias);
}

result<std::string> engine_control::model_list() {
    namespace json = boost::json;
    if (!router_ && !traced_) return make_error(status::unsupported, k_no_generations);
    json::array gens;
    for (const auto& g : traced_ ? traced_->model_list() : router_->list()) {
        json::array chips;
        for (auto c : g.chips) chips.push_back(c);
        gens.push_back(json::object{{"alias", g.alias},         {"generation", g.generation}, {"dir", g.dir},
                                    {"state", g.state},         {"reason", g.reason},         {"chips", std::move(chips)},
                                    {"resident", g.resident},   {"current", g.current},       {"in_flight", g.in_flight},
                                    {"switch_ms", g.switch_ms}, {"drain_ms", g.drain_ms},
                                    {"tail_requests", g.tail_requests}});
    }
    json::object o{{"generations", std::move(gens)}};
    if (router_ && !router_->state_note().empty()) o["state_note"] = router_->state_note();
    return json_text(o);
}

namespace {
const char* const k_not_recordable =
    "this daemon is not recordable: start it with --trace FILE or --set runtime.recordable=true";
}

void_result engine_control::trace_start(const std::string& path) {
    if (!traced_) return make_error(status::unsupported, k_not_recordable);
    return traced_->start_trace(path);
}

result<std::string> engine_control::trace_stop() {
    if (!traced_) return make_error(status::unsupported, k_not_recordable);
    return traced_->stop_trace();
}

}  // namespace calserve::net
