// The `cpu` backend (see cpu_backend.hpp).
#include "device/sim/cpu_backend.hpp"

#include <algorithm>
#include <limits>

#include <spdlog/spdlog.h>

#include "device/package_spec.hpp"
#include "device/sim/reference_model.hpp"

namespace calserve::device::sim {

namespace {
tensor_desc io_tensor(std::string name, std::vector<std::int64_t> shape, dtype t, std::uint64_t base) {
    tensor_desc d{std::move(name), std::move(shape), t, 0, base, 0, 0};
    d.bytes = static_cast<std::uint64_t>(d.elements()) * dtype_size(t);
    d.pong_address = base + ((d.bytes + 0xfff) & ~std::uint64_t{0xfff});  // next page: never aliases ping
    return d;
}

// `batch` rows of `tokens` each: token/position {batch, tokens}, logits {batch, 1, vocab}.
submodel_desc program(std::string name, submodel_kind kind, std::int64_t batch, std::int64_t tokens,
                      std::int64_t vocab, std::uint64_t base) {
    submodel_desc sm;
    sm.name = std::move(name);
    sm.kind = kind;
    sm.batch = batch;
    sm.max_tokens = tokens;
    const std::uint64_t span =
        (static_cast<std::uint64_t>(batch * tokens) * 4 * 2 + (1u << 20)) & ~std::uint64_t{0xfff};
    sm.inputs = {io_tensor("token", {batch, tokens}, dtype::int32, base),
                 io_tensor("position", {batch, tokens}, dtype::int32, base + span)};
    sm.outputs = {io_tensor("logits", {batch, 1, vocab}, dtype::bf16, base + 2 * span)};
    sm.csrs = {{std::string(k_csr_cur_seq_len), 0x1104}, {std::string(k_csr_past_kv_len), 0x1144}};
    return sm;
}
}  // namespace

package_spec cpu_package_spec(const model::hf_config& hf, std::int64_t context, std::int64_t sequences,
                              const std::filesystem::path& model_dir, std::int64_t max_batch) {
    package_spec p;
    const std::string stem = model_dir.filename().string().empty() ? "cpu" : model_dir.filename().string();
    p.name = stem + " (cpu)";
    p.architecture = hf.architecture;
    p.runtime_version = "cpu";
    p.vocab_size = hf.vocab_size;
    p.context = context;
    p.chip_count = 1;
    p.calcores_per_chip = 1;
    p.batch = std::max<std::int64_t>(1, max_batch);
    p.submodels = {program("cpu_prefill", submodel_kind::prefill, 1, context, hf.vocab_size, 0x100000000ULL)};
    add_scoring(p.submodels.front());
    for (std::int64_t b = 1; b <= p.batch; ++b) {
        const std::uint64_t base = 0x900000000ULL + static_cast<std::uint64_t>(b - 1) * 0x10000000ULL;
        p.submodels.push_back(program(b == 1 ? "cpu_decode" : "cpu_decode_b" + std::to_string(b),
                                      submodel_kind::decode, b, 1, hf.vocab_size, base));
    }
    p.kv = kv_layout{hf.num_hidden_layers, hf.num_key_value_heads, hf.head_dim, context, std::max<std::int64_t>(1, sequences), 2, 2, 256};
    p.chips = {chip_memory{0, 0}};
    p.reference_model_dir = model_dir;
    p.hidden_size = hf.hidden_size;
    p.num_heads = hf.num_attention_heads;
    p.num_experts = hf.num_experts;
    p.experts_per_token = hf.num_experts_per_tok;
    p.intermediate_size = hf.is_moe() ? hf.moe_intermediate_size : hf.intermediate_size;
    return p;
}

result<std::shared_ptr<sim_device>> open_cpu_device(const std::filesystem::path& model_dir, const config& cfg,
                                                    sim_scheduler& scheduler, std::shared_ptr<fault_registry> faults,
                                                    std::int64_t head_k) {
    auto hf = model::load_hf_config(model_dir);
    if (!hf) return hf.error();
    const std::int64_t context = std::min<std::int64_t>(hf->max_position_embeddings, cfg.integer("runtime.slot_context"));
    const std::int64_t max_batch = cfg.integer("runtime.max_batch");
    auto spec = cpu_package_spec(*hf, context, cfg.integer("runtime.max_running"), model_dir,
                                 max_batch > 0 ? max_batch : k_cpu_default_max_batch);
    if (head_k > 0) {
        spec.sampling_head_k = std::min(head_k, spec.vocab_size);
        for (auto& sm : spec.submodels)
            if (sm.kind == submodel_kind::decode) add_sampling_head(sm, spec.sampling_head_k);
    }
    sim_options o = sim_options_for(cfg, scheduler, std::move(faults));
    const auto arith = model::parse_arithmetic(cfg.string("device.cpu_arithmetic")).value_or(model::arithmetic::bf16);
    o.make_model = reference_model_factory(static_cast<int>(cfg.integer("device.sim.model_threads")), arith);
    o.arithmetic = arith;
    spdlog::info("cpu backend: {} arithmetic{}", model::to_string(arith),
                 arith == model::arithmetic::bf16 && !model::bf16_products_native()
                     ? " (no AVX512_BF16 on this CPU: the portable form, same bits, slower; consider fp32)"
                     : "");
    o.latency = latency_constants{};
    // No NPU pacing unless asked for: by default a job completes when its numbers
    // exist; an explicit device.sim.step_ms / d2h_ms (the soak) paces it.
    o.latency.step_ms = std::max(0.0, cfg.number("device.sim.step_ms"));
    o.latency.d2h_ms = std::max(0.0, cfg.number("device.sim.d2h_ms"));
    o.latency.pcie_gbps = std::numeric_limits<double>::infinity();
    o.dram_bytes_per_chip = std::numeric_limits<std::uint64_t>::max();
    o.sram_bytes_per_chip = std::numeric_limits<std::uint64_t>::max();
    o.board_chips = 1;
    o.calcores_per_chip = 1;
    auto dev = sim_device::create(std::move(o));
    if (auto r = dev->load(spec); !r) return r.error();
    if (auto r = dev->configure(); !r) return r.error();
    if (auto r = dev->warmup(); !r) return r.error();
    return dev;
}

}  // namespace calserve::device::sim
