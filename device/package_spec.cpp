// package_spec from a loaded package (see package_spec.hpp), the device-level
// load_package convenience and the host-side logits check.
#include "device/package_spec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "device/device.hpp"
#include "device/bf16.hpp"
#include "device/sampling_head.hpp"
#include "device/scoring.hpp"
#include "model/weights/hf_config.hpp"

namespace calserve::device {

namespace {
result<dtype> convert(model::package::dtype t) { return parse_dtype(model::package::to_string(t)); }

result<tensor_desc> convert(const model::package::tensor_spec& t) {
    auto type = convert(t.type);
    if (!type) return type.error();
    return tensor_desc{t.name, t.shape, *type, t.byte_size, t.ping_addr, t.pong_addr, t.chip};
}

result<submodel_desc> convert(const model::package::submodel& sm, std::uint32_t chips) {
    submodel_desc d;
    d.name = sm.name;
    d.kind = sm.role == model::package::submodel_role::prefill ? submodel_kind::prefill : submodel_kind::decode;
    d.batch = sm.batch;
    d.max_tokens = sm.max_tokens;
    d.chip_mask = (1u << chips) - 1u;  // whole-graph tensor parallel: every chip runs every submodel
    d.workspace_bytes_per_chip = sm.workspace_bytes_per_chip;
    d.command_bytes_per_chip = sm.command_bytes_per_chip;
    if (d.kind == submodel_kind::prefill && sm.batch != model::package::k_prefill_batch)
        return make_error(status::unsupported, sm.name + ": only batch-1 prefill programs exist");
    if (sm.batch == 0 || sm.batch > model::package::k_max_decode_batch)
        return make_error(status::unsupported, sm.name + ": decode batch " + std::to_string(sm.batch) +
                                                   " outside 1.." + std::to_string(model::package::k_max_decode_batch));
    for (const auto& t : sm.inputs) {
        auto c = convert(t);
        if (!c) return c.error();
        d.inputs.push_back(std::move(*c));
    }
    for (const auto& t : sm.outputs) {
        auto c = convert(t);
        if (!c) return c.error();
        d.outputs.push_back(std::move(*c));
    }
    for (const auto& c : sm.csrs) d.csrs.push_back(csr_desc{c.name, c.offset});
    return d;
}

// A decode profile of batch B: token and position [B,1], logits [B,1,vocab].
void_result check_profile_shapes(const submodel_desc& d, std::int64_t vocab) {
    if (d.kind != submodel_kind::decode) return {};
    const std::vector<std::int64_t> rows{d.batch, 1}, logits{d.batch, 1, vocab};
    for (const auto& t : d.inputs)
        if ((t.name == "token" || t.name == "position") && t.shape != rows)
            return make_error(status::shape_mismatch, d.name + "/" + t.name + " is not [" + std::to_string(d.batch) + ",1]");
    for (const auto& t : d.outputs)
        if (t.name == "logits" && t.shape != logits)
            return make_error(status::shape_mismatch,
                              d.name + "/logits is not [" + std::to_string(d.batch) + ",1," + std::to_string(vocab) + "]");
    return {};
}

// Prefill first, then the decode profiles by ascending batch, so first_of(decode) is batch 1;
// spec.batch is the largest profile.
void_result order_profiles(package_spec& spec) {
    std::stable_sort(spec.submodels.begin(), spec.submodels.end(), [](const submodel_desc& a, const submodel_desc& b) {
        if (a.kind != b.kind) return a.kind == submodel_kind::prefill;
        return a.batch < b.batch;
    });
    std::int64_t largest = 0;
    for (const auto& d : spec.submodels)
        if (d.kind == submodel_kind::decode) largest = std::max(largest, d.batch);
    if (largest != spec.batch)
        return make_error(status::package_invalid, "manifest batch " + std::to_string(spec.batch) +
                                                       " is not the largest decode profile " + std::to_string(largest));
    return {};
}


// A tensor's ping and pong buffers, page-aligned after `end`, which moves past them.
tensor_desc place_after(std::uint64_t& end, std::string_view name, std::vector<std::int64_t> shape, dtype type) {
    constexpr std::uint64_t page = 4096;
    auto align = [](std::uint64_t v) { return (v + page - 1) / page * page; };
    tensor_desc t{std::string(name), std::move(shape), type, 0, 0, 0, 0};
    t.bytes = std::uint64_t(t.elements()) * dtype_size(type);
    t.ping_address = align(end);
    t.pong_address = align(t.ping_address + t.bytes);
    end = t.pong_address + t.bytes;
    return t;
}

// The end of the last buffer the submodel's tensors occupy.
std::uint64_t buffers_end(const submodel_desc& d) {
    std::uint64_t end = 0;
    for (const auto* list : {&d.inputs, &d.outputs})
        for (const auto& t : *list) end = std::max({end, t.ping_address + t.bytes, t.pong_address + t.bytes});
    return end;
}
}  // namespace

// The sampling head's tensors of a decode program (device/sampling_head.hpp), placed in
// the program's I/O plan after its last buffer: ping and pong each page-aligned.
void add_sampling_head(submodel_desc& d, std::int64_t k) {
    std::uint64_t end = buffers_end(d);
    add_sampling_head(d, k, end);
}

void add_sampling_head(submodel_desc& d, std::int64_t k, std::uint64_t& end) {
    auto place = [&](std::string_view name, std::vector<std::int64_t> shape, dtype type) {
        return place_after(end, name, std::move(shape), type);
    };
    const std::int64_t b = d.batch;
    d.inputs.push_back(place(k_head_params, {b, k_head_row_words}, dtype::uint32));
    d.outputs.push_back(place(k_head_sampled, {b}, dtype::int32));
    d.outputs.push_back(place(k_head_rng, {b, k_head_rng_words}, dtype::uint32));
    d.outputs.push_back(place(k_head_topk_logits, {b, k}, dtype::fp32));
    d.outputs.push_back(place(k_head_topk_ids, {b, k}, dtype::int32));
    d.outputs.push_back(place(k_head_lse, {b}, dtype::fp64));
    d.inputs.push_back(place(k_head_drafts, {b, k_verify_drafts_max}, dtype::int32));
    d.outputs.push_back(place(k_head_accepted, {b}, dtype::int32));
    d.head_k = k;
}

void add_scoring(submodel_desc& d) {
    std::uint64_t end = buffers_end(d);
    add_scoring(d, end);
}

void add_scoring(submodel_desc& d, std::uint64_t& end) {
    auto place = [&](std::string_view name, std::vector<std::int64_t> shape, dtype type) {
        return place_after(end, name, std::move(shape), type);
    };
    const std::int64_t n = d.max_tokens;
    d.inputs.push_back(place(k_score_request, {n, 2}, dtype::int32));
    d.outputs.push_back(place(k_score_logprobs, {n}, dtype::fp32));
    d.outputs.push_back(place(k_score_top_ids, {n, k_score_top_max}, dtype::int32));
    d.outputs.push_back(place(k_score_top_logprobs, {n, k_score_top_max}, dtype::fp32));
}

namespace {

// Shape facts of the packaged model for the latency model: document 000's layout
// keeps the model's structure config in __Tokenizer/config.json (the real
// architecture, e.g. Qwen3-30B-A3B for the replica whose reference model is a tiny
// stand-in); the reference model's config.json is the fallback.
void add_shape_facts(package_spec& spec, const std::filesystem::path& root) {
    auto cfg = model::load_hf_config(root / "__Tokenizer");
    if (!cfg && !spec.reference_model_dir.empty()) cfg = model::load_hf_config(spec.reference_model_dir);
    if (!cfg) return;  // the latency model then counts parameter bytes only
    spec.hidden_size = cfg->hidden_size;
    spec.num_heads = cfg->num_attention_heads;
    spec.num_experts = cfg->num_experts;
    spec.experts_per_token = cfg->num_experts_per_tok;
    spec.intermediate_size = cfg->is_moe() ? cfg->moe_intermediate_size : cfg->intermediate_size;
}
}  // namespace

result<package_spec> package_spec_from(const model::package::package& pkg) {
    package_spec spec;
    spec.name = pkg.model_name;
    spec.architecture = pkg.architecture;
    spec.runtime_version = pkg.runtime_name + " " + pkg.runtime_version;
    spec.vocab_size = pkg.vocab;
    spec.context = pkg.context;
    spec.batch = pkg.batch;
    spec.chip_count = pkg.topo.chips;
    spec.calcores_per_chip = pkg.topo.calcores_per_chip;
    for (const auto& sm : pkg.submodels) {
        auto d = convert(sm, pkg.topo.chips);
        if (!d) return d.error();
        spec.submodels.push_back(std::move(*d));
    }
    spec.kv.layers = pkg.kv.layers;
    spec.kv.kv_heads = pkg.kv.kv_heads;
    spec.kv.head_dim = pkg.kv.head_dim;
    spec.kv.context = pkg.kv.context;
    spec.kv.slots = pkg.kv.batch;
    spec.kv.k_bytes = static_cast<std::int64_t>(model::package::dtype_bytes(pkg.kv.k_dtype));
    spec.kv.v_bytes = static_cast<std::int64_t>(model::package::dtype_bytes(pkg.kv.v_dtype));
    spec.kv.v_scale_bytes = static_cast<std::int64_t>(pkg.kv.v_scale_bytes());
    spec.chips.resize(pkg.topo.chips);
    for (const auto& c : pkg.chips) {
        if (c.index >= spec.chips.size()) return make_error(status::package_invalid, "chip index beyond topology");
        spec.chips[c.index] = chip_memory{c.param_dram_bytes, c.param_sram_bytes};
    }
    spec.reference_model_dir = pkg.reference_model_dir;
    if (!model::package::known_placement(pkg.placement))
        return make_error(status::package_invalid, "manifest placement '" + pkg.placement + "' is not tp, ep or pp");
    spec.placement = pkg.placement;
    spec.sampling_head_k = pkg.sampling_head_k;
    if (spec.sampling_head_k > 0) {
        if (spec.sampling_head_k > spec.vocab_size)
            return make_error(status::package_invalid, "sampling head top-k " + std::to_string(spec.sampling_head_k) +
                                                           " exceeds the vocabulary " + std::to_string(spec.vocab_size));
        // Past every program's I/O plan, one program after the other: no buffer shared.
        std::uint64_t end = 0;
        for (const auto& d : spec.submodels)
            for (const auto* list : {&d.inputs, &d.outputs})
                for (const auto& t : *list) end = std::max({end, t.ping_address + t.bytes, t.pong_address + t.bytes});
        for (auto& d : spec.submodels)
            if (d.kind == submodel_kind::decode) add_sampling_head(d, spec.sampling_head_k, end);
    }
    {  // the scoring tensors of every prefill program, past every I/O plan (head included)
        std::uint64_t end = 0;
        for (const auto& d : spec.submodels)
            for (const auto* list : {&d.inputs, &d.outputs})
                for (const auto& t : *list) end = std::max({end, t.ping_address + t.bytes, t.pong_address + t.bytes});
        for (auto& d : spec.submodels)
            if (d.kind == submodel_kind::prefill) add_scoring(d, end);
    }
    add_shape_facts(spec, pkg.root);
    if (auto r = order_profiles(spec); !r) return r.error();
    if (auto r = validate(spec); !r) return r.error();
    for (const auto& sm : spec.submodels) {
        if (auto r = check_profile_shapes(sm, spec.vocab_size); !r) return r.error();
        for (const auto& t : sm.outputs) {
            if (t.name == "logits" && t.elements() != sm.batch * spec.vocab_size)
                return make_error(status::shape_mismatch, sm.name + "/logits has " + std::to_string(t.elements()) +
                                                              " elements, batch x vocab is " +
                                                              std::to_string(sm.batch) + " x " +
                                                              std::to_string(spec.vocab_size));
        }
    }
    return spec;
}

result<package_spec> package_spec_from_dir(const std::filesystem::path& dir) {
    auto pkg = model::package::load_package(dir);
    if (!pkg) return pkg.error();
    return package_spec_from(*pkg);
}

std::string_view to_string(kv_seq_op op) {
    switch (op) {
        case kv_seq_op::copy: return "copy";
        case kv_seq_op::keep: return "keep";
        case kv_seq_op::add: return "add";
        case kv_seq_op::div: return "div";
        case kv_seq_op::state: return "state";
        case kv_seq_op::shift: return "shift";
    }
    return "?";
}

void_result device::kv_sequence_op_unsupported(kv_seq_op op) const {
    return make_error(status::unsupported, "KV sequence operation '" + std::string(to_string(op)) +
                                               "' is not supported (only copy and keep; docs/device.md)");
}

void_result device::load_package(const std::filesystem::path& dir) {
    auto spec = package_spec_from_dir(dir);
    if (!spec) return spec.error();
    return load(*spec);
}

namespace {
bool not_finite(const std::byte* logits, std::size_t i) {
    model::bf16 v;
    std::memcpy(&v, logits + i * sizeof v, sizeof v);
    return (v & 0x7f80u) == 0x7f80u;  // exponent all ones: Inf or NaN
}

// Four BF16 values per 64-bit word. A value is Inf or NaN when its exponent bits
// (0x7f80) are all ones; adding 0x0080 to the masked lane carries into the lane's
// bit 15 exactly then, and never across lanes. Branch-free, so it vectorises.
bool any_not_finite(const std::byte* p, std::size_t values) {
    constexpr std::uint64_t k_exp = 0x7f807f807f807f80ull;
    constexpr std::uint64_t k_one = 0x0080008000800080ull;
    constexpr std::uint64_t k_top = 0x8000800080008000ull;
    const std::size_t words = values / 4;
    std::uint64_t hit = 0;
    for (std::size_t w = 0; w < words; ++w) {
        std::uint64_t v;
        std::memcpy(&v, p + w * sizeof v, sizeof v);
        hit |= ((v & k_exp) + k_one) & k_top;
    }
    for (std::size_t i = words * 4; i < values; ++i) hit |= not_finite(p, i) ? 1u : 0u;
    return hit != 0;
}

constexpr std::size_t k_check_block = 8192;  // values: 16 KB, checked while in L1

void_result first_not_finite(const std::byte* p, std::size_t base, std::size_t values) {
    for (std::size_t i = 0; i < values; ++i)
        if (not_finite(p, i)) return make_error(status::logits_nan, "logit " + std::to_string(base + i) + " is not finite");
    return {};
}
}  // namespace

void_result check_logits_bf16(std::span<const std::byte> logits) {
    const std::size_t n = logits.size() / sizeof(model::bf16);
    for (std::size_t b = 0; b < n; b += k_check_block) {
        const std::size_t len = std::min(n - b, k_check_block);
        const std::byte* p = logits.data() + b * sizeof(model::bf16);
        if (any_not_finite(p, len)) return first_not_finite(p, b, len);
    }
    return {};
}

void_result device::read_output(std::string_view submodel, slot s, std::string_view tensor,
                                std::vector<std::byte>& host) {
    auto out = output(submodel, s, tensor);
    if (!out) return out.error();
    host.assign(out->begin(), out->end());
    return {};
}

}  // namespace calserve::device
