// Latency model of the simulated NPU (see latency_model.hpp).
#include "device/sim/latency_model.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace calserve::device::sim {

latency_constants latency_constants::from_config(const config& cfg) {
    latency_constants c;
    c.dram_gbps = cfg.number("device.sim.dram_gbps");
    c.pcie_gbps = cfg.number("device.sim.pcie_gbps");
    c.d2d_gbps = cfg.number("device.sim.d2d_gbps");
    c.peak_tflops = cfg.number("device.sim.peak_tflops");
    c.sync_us = cfg.number("device.sim.sync_us");
    c.launch_us = cfg.number("device.sim.launch_us");
    c.step_ms = cfg.number("device.sim.step_ms");
    c.d2h_ms = cfg.number("device.sim.d2h_ms");
    c.all_experts = cfg.string("device.sim.cost_experts") == "all";
    return c;
}

namespace {
double bytes_ms(double bytes, double gbps) { return bytes / (gbps * 1e9) * 1e3; }
}  // namespace

latency_model::latency_model(const package_spec& spec, latency_constants constants) : c_(constants), spec_(spec) {
    const double h = static_cast<double>(spec.hidden_size);
    const double layers = static_cast<double>(spec.kv.layers);
    const double q_dim = static_cast<double>(spec.num_heads * spec.kv.head_dim);
    const double kv_dim = static_cast<double>(spec.kv.kv_heads * spec.kv.head_dim);
    const double attention = layers * (2.0 * h * q_dim + 2.0 * h * kv_dim);
    const double embed = static_cast<double>(spec.vocab_size) * h * 2.0;
    const double ffn_one = 3.0 * h * static_cast<double>(spec.intermediate_size);
    const double experts = spec.num_experts > 0 ? layers * static_cast<double>(spec.num_experts) * ffn_one : 0.0;
    const double dense_ffn = spec.num_experts > 0 ? 0.0 : layers * ffn_one;
    params_total_ = attention + embed + experts + dense_ffn;
    expert_fraction_ = params_total_ > 0 ? experts / params_total_ : 0.0;
}

double latency_model::active_weight_fraction(std::int64_t tokens) const {
    if (spec_.num_experts <= 0 || expert_fraction_ <= 0 || c_.all_experts) return 1.0;
    const double k_over_e = static_cast<double>(spec_.experts_per_token) / static_cast<double>(spec_.num_experts);
    const double touched = 1.0 - std::pow(1.0 - std::clamp(k_over_e, 0.0, 1.0), static_cast<double>(tokens));
    return (1.0 - expert_fraction_) + expert_fraction_ * touched;
}

std::uint64_t latency_model::slowest_chip_bytes() const {
    std::uint64_t bytes = 0;
    for (std::uint32_t c = 0; c < spec_.chip_count; ++c) bytes = std::max(bytes, spec_.parameter_bytes(c));
    return bytes;
}

// Parameters one token multiplies by: everything but the experts it is not routed to.
double latency_model::active_parameters_per_token() const {
    if (c_.all_experts) return params_total_;
    const double k_over_e = spec_.num_experts > 0 ? static_cast<double>(spec_.experts_per_token) /
                                                        static_cast<double>(spec_.num_experts)
                                                  : 0.0;
    return params_total_ * (1.0 - expert_fraction_) + params_total_ * expert_fraction_ * k_over_e;
}

// Attention multiply-adds x 2 of `tokens` new tokens after `past` held ones (causal).
double latency_model::attention_flops(std::int64_t tokens, std::int64_t past) const {
    const double t = static_cast<double>(tokens);
    return 4.0 * static_cast<double>(spec_.kv.layers * spec_.num_heads * spec_.kv.head_dim) * t *
           (static_cast<double>(past) + (t + 1.0) / 2.0);
}

double latency_model::kv_copy_ms(std::int64_t tokens) const {
    const double chips = static_cast<double>(std::max<std::uint32_t>(1, spec_.chip_count));
    const double bytes = static_cast<double>(spec_.kv.bytes_per_token()) * static_cast<double>(tokens) / chips;
    return bytes_ms(2.0 * bytes, c_.dram_gbps);
}

step_breakdown latency_model::finish(step_breakdown b) const {
    b.weights_ms = bytes_ms(b.weight_bytes, c_.dram_gbps);
    b.kv_ms = bytes_ms(b.kv_bytes, c_.dram_gbps);
    b.sync_ms = b.syncs * c_.sync_us / 1e3;
    b.flops_ms = b.flops / (c_.peak_tflops * 1e12) * 1e3;
    b.d2d_ms = bytes_ms(b.d2d_bytes, c_.d2d_gbps);
    b.launch_ms = c_.launch_us / 1e3;
    b.total_ms = b.weights_ms + b.kv_ms + b.sync_ms + b.flops_ms + b.d2d_ms + b.launch_ms;
    if (c_.step_ms >= 0) {
        b.total_ms = c_.step_ms;
        b.overridden = true;
    }
    return b;
}

step_breakdown latency_model::step(submodel_kind kind, std::int64_t tokens, std::int64_t past) const {
    if (kind == submodel_kind::decode && tokens == 1) return decode_batch_step(std::span(&past, 1), 1);
    step_breakdown b;
    const double chips = std::max<double>(1.0, spec_.chip_count);
    const double t = static_cast<double>(tokens);
    const double p = static_cast<double>(past);
    b.weight_bytes = static_cast<double>(slowest_chip_bytes()) * active_weight_fraction(tokens);
    b.kv_bytes = static_cast<double>(spec_.kv.bytes_per_token()) * (p + 2.0 * t) / chips;  // read all, write new
    b.syncs = chips > 1 ? 2.0 * static_cast<double>(spec_.kv.layers) : 0.0;
    b.d2d_bytes = b.syncs * t * static_cast<double>(spec_.hidden_size) * 2.0;
    b.flops = (2.0 * active_parameters_per_token() * t + attention_flops(tokens, past)) / chips;
    return finish(b);
}

step_breakdown latency_model::decode_batch_step(std::span<const std::int64_t> pasts, std::int64_t batch) const {
    step_breakdown b;
    const double chips = std::max<double>(1.0, spec_.chip_count);
    const double rows = static_cast<double>(std::max<std::int64_t>({batch, static_cast<std::int64_t>(pasts.size()), 1}));
    // One pass over the weights for every row (MoE: the experts any of the rows is routed to).
    b.weight_bytes = static_cast<double>(slowest_chip_bytes()) * active_weight_fraction(static_cast<std::int64_t>(rows));
    // Each live row reads its own KV and writes one token; padding rows hold none.
    double kv_tokens = 0, attention = 0;
    for (std::int64_t p : pasts) {
        kv_tokens += static_cast<double>(p) + 2.0;
        attention += attention_flops(1, p);
    }
    b.kv_bytes = static_cast<double>(spec_.kv.bytes_per_token()) * kv_tokens / chips;
    b.syncs = chips > 1 ? 2.0 * static_cast<double>(spec_.kv.layers) : 0.0;  // once per layer, all rows together
    b.d2d_bytes = b.syncs * rows * static_cast<double>(spec_.hidden_size) * 2.0;
    // Every row is computed, padding included (a real device cannot skip it).
    b.flops = (2.0 * active_parameters_per_token() * rows + attention) / chips;
    return finish(b);
}

double latency_model::head_ms(std::int64_t rows) const {
    if (c_.step_ms >= 0 || rows <= 0) return 0;
    return bytes_ms(2.0 * 2.0 * static_cast<double>(spec_.vocab_size) * static_cast<double>(rows), c_.dram_gbps);
}

double latency_model::h2d_ms(std::uint64_t bytes) const { return bytes_ms(static_cast<double>(bytes), c_.pcie_gbps); }

double latency_model::d2h_ms(std::uint64_t bytes) const {
    return c_.d2h_ms >= 0 ? c_.d2h_ms : bytes_ms(static_cast<double>(bytes), c_.pcie_gbps);
}

double latency_model::configure_ms() const {
    return bytes_ms(static_cast<double>(spec_.total_parameter_bytes()), c_.pcie_gbps);
}

std::vector<std::pair<std::string, std::string>> describe_constants(const latency_constants& c) {
    auto num = [](double v) {
        std::ostringstream o;
        o << v;
        return o.str();
    };
    return {
        {"device.sim.dram_gbps", num(c.dram_gbps) + " GB/s per chip (assumption)"},
        {"device.sim.pcie_gbps", num(c.pcie_gbps) + " GB/s host link (assumption)"},
        {"device.sim.d2d_gbps", num(c.d2d_gbps) + " GB/s chip-to-chip (assumption)"},
        {"device.sim.peak_tflops", num(c.peak_tflops) + " TFLOP/s per chip (assumption)"},
        {"device.sim.sync_us", num(c.sync_us) + " us per cross-chip sync (assumption)"},
        {"device.sim.launch_us", num(c.launch_us) + " us per infer (assumption)"},
        {"device.sim.step_ms", c.step_ms >= 0 ? num(c.step_ms) + " ms fixed compute" : "model (-1)"},
        {"device.sim.d2h_ms", c.d2h_ms >= 0 ? num(c.d2h_ms) + " ms fixed output copy" : "model (-1)"},
        {"device.sim.cost_experts", c.all_experts ? "all (MoE priced as dense, what-if)" : "routed"},
    };
}

}  // namespace calserve::device::sim
