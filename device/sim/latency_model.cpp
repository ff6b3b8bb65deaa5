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
    const auto placement = parse_parallel(cfg.string("device.sim.placement"));  // "package": none named
    c.placement = placement.value_or(parallel_kind::tp);
    c.placement_set = placement.has_value();
    c.routing_skew = cfg.number("device.sim.routing_skew");
    c.all_to_all_us = cfg.number("device.sim.all_to_all_us");
    c.micro_batches = int(cfg.integer("device.sim.micro_batches"));
    return c;
}

latency_constants latency_constants::for_package(const package_spec& spec) const {
    latency_constants c = *this;
    if (!c.placement_set) c.placement = parse_parallel(spec.placement).value_or(parallel_kind::tp);
    return c;
}

std::string_view to_string(parallel_kind p) {
    switch (p) {
        case parallel_kind::tp: return "tp";
        case parallel_kind::ep: return "ep";
        case parallel_kind::pp: return "pp";
    }
    return "tp";
}

std::optional<parallel_kind> parse_parallel(std::string_view text) {
    for (auto p : {parallel_kind::tp, parallel_kind::ep, parallel_kind::pp})
        if (text == to_string(p)) return p;
    return std::nullopt;
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
    // ep: Zipf(routing_skew) popularity over the expert index, expert e on chip e mod N.
    const auto n = std::max<std::uint32_t>(1, spec.chip_count);
    chip_load_.assign(n, 0.0);
    double sum = 0;
    for (std::int64_t e = 0; e < spec.num_experts; ++e) {
        expert_share_.push_back(std::pow(static_cast<double>(e + 1), -c_.routing_skew));
        sum += expert_share_.back();
    }
    for (std::size_t e = 0; e < expert_share_.size(); ++e) {
        expert_share_[e] /= sum;
        chip_load_[e % n] += expert_share_[e];
    }
    if (c_.routing && check_routing(spec, *c_.routing)) routing_ = make_routing_load(*c_.routing, n);
}

double latency_model::imbalance() const {
    if (!routing_.empty()) return routing_.mean_imbalance();
    if (expert_share_.empty()) return 1.0;
    return *std::max_element(chip_load_.begin(), chip_load_.end()) * static_cast<double>(chip_load_.size());
}

std::uint64_t latency_model::placed_parameter_bytes(std::uint32_t chip) const {
    const double total = static_cast<double>(spec_.total_parameter_bytes());
    switch (c_.placement) {
        case parallel_kind::tp: return spec_.parameter_bytes(chip);
        case parallel_kind::pp: return static_cast<std::uint64_t>(total / chips());
        case parallel_kind::ep: break;
    }
    double share = 1.0 / chips();  // the chip's share of the experts (e mod N)
    if (!expert_share_.empty()) {
        std::size_t held = 0;
        for (std::size_t e = chip; e < expert_share_.size(); e += chip_load_.size()) ++held;
        share = static_cast<double>(held) / static_cast<double>(expert_share_.size());
    }
    return static_cast<std::uint64_t>(total * (1.0 - expert_fraction_) + total * expert_fraction_ * share);
}

double latency_model::link_bytes_per_token() const {
    const double n = chips();
    if (n <= 1) return 0;
    const double hidden_bytes = static_cast<double>(spec_.hidden_size) * 2.0;  // BF16 activations
    const double layers = static_cast<double>(spec_.kv.layers);
    switch (c_.placement) {
        case parallel_kind::tp: return 2.0 * layers * hidden_bytes;
        case parallel_kind::pp: return (n - 1.0) * hidden_bytes;
        case parallel_kind::ep: break;
    }
    if (spec_.num_experts <= 0) return 0;
    // Dispatch and combine: every (token, expert) pair whose expert is on another chip.
    return 2.0 * layers * static_cast<double>(spec_.experts_per_token) * (n - 1.0) / n * hidden_bytes;
}

double latency_model::active_weight_fraction(std::int64_t tokens) const {
    if (spec_.num_experts <= 0 || expert_fraction_ <= 0 || c_.all_experts) return 1.0;
    return (1.0 - expert_fraction_) + expert_fraction_ * touched_experts(static_cast<double>(tokens), std::nullopt);
}

// Uniform routing: each expert is touched by T tokens with probability 1 - (1 - k/E)^T.
// Skewed (Zipf) routing: expert e with popularity p_e, 1 - (1 - p_e)^(kT), averaged over
// the experts of `chip` (all when none): popular experts are shared, fewer distinct ones read.
double latency_model::touched_experts(double tokens, std::optional<std::size_t> chip) const {
    if (c_.all_experts || expert_share_.empty()) return 1.0;
    if (!routing_.empty()) return routing_.touched(tokens);  // ep's hottest chip: expert_parallel
    if (c_.routing_skew <= 0) {
        const double k_over_e = static_cast<double>(spec_.experts_per_token) / static_cast<double>(spec_.num_experts);
        return 1.0 - std::pow(1.0 - std::clamp(k_over_e, 0.0, 1.0), tokens);
    }
    const double selections = tokens * static_cast<double>(spec_.experts_per_token);
    const std::size_t step = chip ? chip_load_.size() : 1;
    double touched = 0, held = 0;
    for (std::size_t e = chip.value_or(0); e < expert_share_.size(); e += step, held += 1)
        touched += 1.0 - std::pow(1.0 - expert_share_[e], selections);
    return held > 0 ? touched / held : 0.0;
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
    const bool all_to_all = c_.placement == parallel_kind::ep && chips() > 1;
    b.sync_ms = b.syncs * (all_to_all ? c_.all_to_all_us : c_.sync_us) / 1e3;
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

step_breakdown latency_model::placed_step(double rows, double kv_tokens, double attention) const {
    return c_.placement == parallel_kind::ep ? expert_parallel(rows, kv_tokens, attention)
                                             : pipeline_parallel(rows, kv_tokens, attention);
}

// The hottest chip sets the step: replicated attention and embeddings read whole, its
// share of the experts read as far as the rows touch them, its share of the expert work.
step_breakdown latency_model::expert_parallel(double rows, double kv_tokens, double attention) const {
    step_breakdown b;
    const double n = chips(), total = static_cast<double>(spec_.total_parameter_bytes());
    const std::size_t hot = static_cast<std::size_t>(std::max_element(chip_load_.begin(), chip_load_.end()) - chip_load_.begin());
    const double k = static_cast<double>(spec_.experts_per_token);
    double held = 0;
    for (std::size_t e = hot; e < expert_share_.size(); e += chip_load_.size()) held += 1;
    const double experts_on_chip = expert_share_.empty() ? 0 : held / static_cast<double>(expert_share_.size());
    // Share of all experts' bytes the hottest chip reads (per layer with routing counts).
    const double expert_read = routing_.empty() || c_.all_experts ? experts_on_chip * touched_experts(rows, hot)
                                                                  : routing_.hot_weight_share(rows);
    b.weight_bytes = total * (1.0 - expert_fraction_) + total * expert_fraction_ * expert_read;
    b.kv_bytes = static_cast<double>(spec_.kv.bytes_per_token()) * kv_tokens / n;  // rows split over the chips
    b.syncs = 2.0 * static_cast<double>(spec_.kv.layers);                           // dispatch + combine per layer
    b.d2d_bytes = rows / n * link_bytes_per_token();
    const double one_expert = expert_share_.empty() ? 0 : params_total_ * expert_fraction_ / static_cast<double>(expert_share_.size());
    const double hot_pairs = routing_.empty() ? chip_load_[hot] : routing_.mean_hot_pairs();
    const double pairs = c_.all_experts ? rows * static_cast<double>(expert_share_.size()) / n : rows * k * hot_pairs;
    b.flops = (2.0 * params_total_ * (1.0 - expert_fraction_) * rows + attention) / n + 2.0 * one_expert * pairs;
    return finish(b);
}

// m micro-batches through N stages: (m + N - 1) stage times on the critical path, each
// stage reading its weights once per micro-batch; a link crossing per boundary per micro-batch.
step_breakdown latency_model::pipeline_parallel(double rows, double kv_tokens, double attention) const {
    step_breakdown b;
    const double n = chips(), total = static_cast<double>(spec_.total_parameter_bytes());
    const double m = std::max(1.0, c_.micro_batches > 0 ? std::min<double>(c_.micro_batches, rows) : std::min(rows, n));
    const double path = m + n - 1.0;
    const auto per_micro = static_cast<std::int64_t>(std::max(1.0, std::round(rows / m)));
    b.weight_bytes = path * total / n * active_weight_fraction(per_micro);
    b.kv_bytes = path / m * static_cast<double>(spec_.kv.bytes_per_token()) * kv_tokens / n;
    b.flops = path / m * (2.0 * active_parameters_per_token() * rows + attention) / n;
    b.syncs = (n - 1.0) * m;
    b.d2d_bytes = rows * link_bytes_per_token();
    return finish(b);
}

step_breakdown latency_model::step(submodel_kind kind, std::int64_t tokens, std::int64_t past) const {
    if (kind == submodel_kind::decode && tokens == 1) return decode_batch_step(std::span(&past, 1), 1);
    if (c_.placement != parallel_kind::tp && chips() > 1)
        return placed_step(static_cast<double>(tokens), static_cast<double>(past) + 2.0 * static_cast<double>(tokens),
                           attention_flops(tokens, past));
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
    if (c_.placement != parallel_kind::tp && chips > 1) return placed_step(rows, kv_tokens, attention);
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

double latency_model::score_ms(std::int64_t positions) const {
    if (c_.step_ms >= 0 || positions <= 0) return 0;
    return bytes_ms(3.0 * 2.0 * static_cast<double>(spec_.vocab_size) * static_cast<double>(positions), c_.dram_gbps);
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
        {"device.sim.placement", std::string(to_string(c.placement)) + (c.placement_set ? " (set" : " (the package's manifest") +
                                     "; docs/twin.md, Placements)"},
        {"device.sim.routing_skew", c.routing ? std::string("replaced by recorded routing counts (ep)")
                                              : num(c.routing_skew) + " Zipf exponent of expert popularity (ep; assumption)"},
        {"device.sim.all_to_all_us", num(c.all_to_all_us) + " us per dispatch or combine (ep; assumption)"},
        {"device.sim.micro_batches", c.micro_batches > 0 ? num(c.micro_batches) : std::string("min(rows, chips) (pp)")},
    };
}

}  // namespace calserve::device::sim
