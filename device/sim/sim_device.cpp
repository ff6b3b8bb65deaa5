// Simulated NPU: creation, package load, configure (memory accounting), warm-up,
// reset and status. Buffers, jobs and KV live in sim_buffers/sim_jobs/sim_kv.cpp.
#include <algorithm>
#include <cmath>
#include <thread>

#include <spdlog/spdlog.h>

#include "config/log.hpp"
#include "device/sim/sim_device.hpp"
#include "device/package_spec.hpp"

namespace calserve::device::sim {

sim_options sim_options::from_config(const config& cfg) {
    sim_options o;
    o.seed = static_cast<std::uint64_t>(cfg.integer("device.sim.seed"));
    o.latency = latency_constants::from_config(cfg);
    o.dram_bytes_per_chip = static_cast<std::uint64_t>(cfg.integer("device.sim.dram_bytes_per_chip"));
    o.sram_bytes_per_chip = static_cast<std::uint64_t>(cfg.integer("device.sim.sram_bytes_per_chip"));
    o.board_chips = static_cast<std::uint32_t>(cfg.integer("device.sim.chips"));
    o.calcores_per_chip = static_cast<std::uint32_t>(cfg.integer("device.sim.calcores_per_chip"));
    o.kv_block_tokens = cfg.integer("device.sim.kv_block_tokens");
    o.cost_package = cfg.string("device.sim.cost_package");
    o.price_by_host_rates = !cfg.boolean("runtime.recordable");
    return o;
}

std::shared_ptr<sim_device> sim_device::create(sim_options options) {
    return std::shared_ptr<sim_device>(new sim_device(std::move(options)));
}

sim_device::sim_device(sim_options options) : options_(std::move(options)) {
    if (!options_.faults) options_.faults = std::make_shared<fault_registry>(options_.seed);
    info_.backend = "sim";
    info_.runtime_version = "CalRT 0.7.6 (simulated)";
    info_.firmware_version = "sim-fw 1";
    info_.driver_version = "sim-drv 1";
    info_.chip_count = options_.board_chips;
    info_.calcores_per_chip = options_.calcores_per_chip;
    info_.dram_bytes_per_chip = options_.dram_bytes_per_chip;
    info_.sram_bytes_per_chip = options_.sram_bytes_per_chip;
    info_.arithmetic = model::to_string(options_.arithmetic);
    if (options_.scheduler && !options_.scheduler->is_virtual()) worker_ = std::make_unique<compute_worker>();
}

sim_device::~sim_device() {
    worker_.reset();  // joins the compute thread before any member it touches goes away
}

void sim_device::set_state(device_state next, std::string why) {
    if (next != state_) spdlog::debug("sim device: {} -> {} ({})", to_string(state_), to_string(next), why);
    state_ = next;
    if (next == device_state::faulted || next == device_state::lost) last_error_ = std::move(why);
    if (next == device_state::ready || next == device_state::configured) last_error_.clear();
}

void_result sim_device::check_usable(bool need_ready) const {
    switch (state_) {
        case device_state::lost: return make_error(status::device_lost, last_error_);
        case device_state::faulted: return make_error(status::not_ready, "device faulted: " + last_error_);
        case device_state::created:
        case device_state::loaded: return make_error(status::not_configured, "configure the package first");
        case device_state::configured:
            if (need_ready) return make_error(status::not_ready, "warm up the device first");
            return {};
        case device_state::ready: return {};
    }
    return make_error(status::internal, "unknown device state");
}

device_status sim_device::status() const {
    std::lock_guard lock(mutex_);
    device_status s;
    s.state = state_;
    s.last_error = last_error_;
    s.jobs_submitted = jobs_submitted_;
    s.jobs_completed = jobs_completed_;
    s.jobs_in_flight = static_cast<std::uint32_t>(in_flight_.size());
    s.resets = resets_;
    s.memory = memory_;
    return s;
}

std::int64_t sim_device::compute_busy_ns() const {
    std::lock_guard lock(mutex_);
    return compute_busy_ns_;
}

void_result sim_device::load(const package_spec& spec) {
    std::lock_guard lock(mutex_);
    if (!options_.scheduler) return make_error(status::internal, "sim device has no scheduler");
    if (state_ != device_state::created && state_ != device_state::loaded)
        return make_error(status::unsupported, "a package is already configured; create a new device");
    if (auto r = validate(spec); !r) return r;
    if (spec.chip_count > options_.board_chips)
        return make_error(status::unsupported, "package needs " + std::to_string(spec.chip_count) +
                                                   " chips, the board has " + std::to_string(options_.board_chips));
    if (spec.calcores_per_chip > options_.calcores_per_chip)
        return make_error(status::unsupported, "package needs more CalCores per chip than the board has");
    spec_ = spec;
    if (options_.kv_block_tokens > 0) spec_.kv.block_tokens = options_.kv_block_tokens;
    if (options_.cost_package.empty()) {
        latency_.emplace(spec_, options_.latency.for_package(spec_));
    } else {
        // Computes with this package, costs time as the other one would (capacity planning).
        auto cost = package_spec_from_dir(options_.cost_package);
        if (!cost) return make_error(cost.code(), "device.sim.cost_package: " + cost.error().message);
        latency_.emplace(*cost, options_.latency.for_package(*cost));
    }
    buffers_.assign(spec_.submodels.size() * k_slot_count, {});
    reset_buffers();
    set_state(device_state::loaded, "package " + spec_.name);
    return {};
}

void sim_device::reset_buffers() {
    for (std::size_t i = 0; i < spec_.submodels.size(); ++i) {
        const auto& sm = spec_.submodels[i];
        for (slot s : {slot::ping, slot::pong}) {
            auto& b = buffers(i, s);
            b.sliced_tokens = -1;
            b.inputs.resize(sm.inputs.size());
            for (std::size_t k = 0; k < sm.inputs.size(); ++k) b.inputs[k].assign(sm.inputs[k].bytes, std::byte{0});
            b.written.assign(sm.inputs.size(), false);
            b.written_bytes = 0;
            const auto rows = static_cast<std::size_t>(std::max<std::int64_t>(1, sm.batch));
            b.csr_cur.assign(rows, std::nullopt);
            b.csr_past.assign(rows, std::nullopt);
            // Host views of the outputs are allocated by the first job that completes: a
            // package (the cpu backend's 16 decode profiles) may have many never used.
            b.outputs.assign(sm.outputs.size(), {});
            b.output_valid = false;
        }
    }
}

std::vector<std::string> sim_device::submodel_names() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> names;
    for (const auto& sm : spec_.submodels) names.push_back(sm.name);
    return names;
}

result<submodel_desc> sim_device::submodel(std::string_view exact_name) const {
    std::lock_guard lock(mutex_);
    if (const auto* sm = spec_.find(exact_name)) return *sm;
    return make_error(status::submodel_not_found, "no submodel named exactly '" + std::string(exact_name) + "'");
}

std::vector<memory_usage> plan_memory(const package_spec& spec, const sim_options& o) {
    std::vector<memory_usage> out;
    const std::uint64_t kv_per_chip = static_cast<std::uint64_t>(spec.kv.total_bytes()) / std::max(1u, spec.chip_count);
    for (std::uint32_t c = 0; c < spec.chip_count; ++c) {
        memory_usage m;
        m.chip = c;
        m.dram_capacity = o.dram_bytes_per_chip;
        m.sram_capacity = o.sram_bytes_per_chip;
        m.dram_used = spec.chips[c].parameter_dram_bytes + kv_per_chip;
        m.sram_used = spec.chips[c].parameter_sram_bytes;
        std::uint64_t workspace = 0;
        for (const auto& sm : spec.submodels) {
            if ((sm.chip_mask & (1u << c)) == 0) continue;
            workspace = std::max(workspace, sm.workspace_bytes_per_chip);
            m.dram_used += sm.command_bytes_per_chip;
            for (const auto* list : {&sm.inputs, &sm.outputs}) {
                for (const auto& t : *list) m.dram_used += t.chip == c ? 2 * t.bytes : 0;
            }
        }
        m.dram_used += workspace;
        out.push_back(m);
    }
    return out;
}

result<configure_report> sim_device::configure() {
    std::unique_lock lock(mutex_);
    if (state_ == device_state::created) return make_error(status::not_configured, "load a package first");
    if (state_ == device_state::lost) return make_error(status::device_lost, last_error_);
    if (state_ != device_state::loaded) return make_error(status::unsupported, "already configured; reset instead");
    const fault_site site{(1u << spec_.chip_count) - 1u, {}, {}, {}};
    if (options_.faults->check(fault_point::configure_fail, site))
        return make_error(status::configure_failed, "injected configure_fail");
    auto plan = plan_memory(spec_, options_);
    for (const auto& m : plan) {
        if (m.dram_used > m.dram_capacity || m.sram_used > m.sram_capacity)
            return make_error(status::out_of_device_memory,
                              "chip " + std::to_string(m.chip) + ": DRAM " + std::to_string(m.dram_used) + " of " +
                                  std::to_string(m.dram_capacity) + " B, SRAM " + std::to_string(m.sram_used) +
                                  " of " + std::to_string(m.sram_capacity) + " B");
    }
    if (!options_.make_model) return make_error(status::configure_failed, "no reference model factory");
    const double modelled_ms = latency_->configure_ms();
    lock.unlock();
    auto model = options_.make_model(spec_);  // slow (reads weights): not under the device lock
    if (!model) return make_error(status::configure_failed, "reference model: " + model.error().what());
    if ((*model)->shape().vocab_size != spec_.vocab_size)
        return make_error(status::configure_failed, "reference model vocab " +
                                                        std::to_string((*model)->shape().vocab_size) +
                                                        " != package vocab " + std::to_string(spec_.vocab_size));
    pause(modelled_ms);
    {
        std::lock_guard model_lock(model_mutex_);
        model_ = std::move(*model);
    }
    lock.lock();
    kv_.emplace(spec_.kv);
    memory_ = plan;
    set_state(device_state::configured, "configured");
    return configure_report{modelled_ms, plan};
}

void_result sim_device::warmup() {
    {
        std::lock_guard lock(mutex_);
        if (auto r = check_usable(false); !r) return r;
        if (!in_flight_.empty()) return make_error(status::submit_busy, "jobs in flight; warm up an idle device");
    }
    // A one-token prefill on a scratch sequence proves the numbers path end to end.
    constexpr model::seq_id k_scratch = ~model::seq_id{0};
    std::vector<float> logits;
    void_result r;
    {
        std::lock_guard model_lock(model_mutex_);
        logits.resize(static_cast<std::size_t>(model_->shape().vocab_size));
        const model::token_id token = 0;
        r = model_->prefill(k_scratch, std::span(&token, 1), logits);
        model_->free_sequence(k_scratch);
    }
    std::lock_guard lock(mutex_);
    if (!r) return make_error(status::configure_failed, "warm-up: " + r.error().what());
    if (std::any_of(logits.begin(), logits.end(), [](float v) { return !std::isfinite(v); }))
        return make_error(status::logits_nan, "warm-up logits not finite");
    set_state(device_state::ready, "warmed up");
    return {};
}

void sim_device::discard_all(std::string_view why, pending_calls& calls) {
    for (auto& j : in_flight_) {
        if (j->finished) continue;
        j->finished = true;
        j->outcome = make_error(status::not_ready, std::string(why));
        if (j->callback && !j->delivered) {
            j->delivered = true;
            calls.push_back([cb = std::move(j->callback), o = *j->outcome]() mutable { cb(std::move(o)); });
            jobs_.erase(j->id);
        } else if (j->delivered) {
            // Its waiter gave up (wait timeout) before the reset: nobody will consume it. Kept,
            // it held its buffers for the life of the device, a job per timed-out wait.
            jobs_.erase(j->id);
        }
    }
    in_flight_.clear();
    for (auto& s : slot_job_) s.reset();
    cv_.notify_all();
}

void_result sim_device::reset() {
    pending_calls calls;
    {
        std::lock_guard lock(mutex_);
        if (state_ == device_state::created || state_ == device_state::loaded)
            return make_error(status::not_configured, "nothing to reset");
        const fault_site site{(1u << spec_.chip_count) - 1u, {}, {}, {}};
        if (options_.faults->check(fault_point::reset_fail, site))
            return make_error(status::reset_failed, "injected reset_fail");
        ++epoch_;  // compute still running for a discarded job becomes a no-op
        discard_all("job discarded by device reset", calls);
        const std::int64_t now = options_.scheduler->now().count();
        h2d_free_ns_ = compute_free_ns_ = d2h_free_ns_ = now;
        kv_->clear();
        seq_length_.clear();
        head_jobs_.clear();
        reset_buffers();
        ++resets_;
        set_state(device_state::configured, "reset");
    }
    if (worker_) worker_->clear_pending();
    {
        std::lock_guard model_lock(model_mutex_);
        if (model_) model_->free_all();
    }
    run_calls(calls);
    return {};
}

void sim_device::pause(double ms) const {
    if (ms <= 0) return;
    const auto d = std::chrono::nanoseconds(static_cast<std::int64_t>(ms * 1e6));
    auto& sched = *options_.scheduler;
    if (sched.is_virtual()) {
        sched.drive_until([] { return false; }, sched.now() + d);
    } else {
        std::this_thread::sleep_for(d);
    }
}

void sim_device::run_calls(pending_calls& calls) {
    for (auto& c : calls) c();
    calls.clear();
}

}  // namespace calserve::device::sim
