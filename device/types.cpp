// Value types of the device layer: dtype names and sizes, package lookups and
// the structural validation every backend runs before accepting a package.
#include "device/types.hpp"

#include <algorithm>
#include <numeric>

namespace calserve::device {

std::string_view to_string(dtype t) {
    switch (t) {
        case dtype::int32: return "int32";
        case dtype::uint32: return "uint32";
        case dtype::bf16: return "bf16";
        case dtype::fp16: return "fp16";
        case dtype::fp32: return "fp32";
        case dtype::int8: return "int8";
        case dtype::uint8: return "uint8";
        case dtype::fp64: return "fp64";
    }
    return "unknown";
}

result<dtype> parse_dtype(std::string_view text) {
    std::string lower(text);
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    for (dtype t : {dtype::int32, dtype::uint32, dtype::bf16, dtype::fp16, dtype::fp32, dtype::int8, dtype::uint8, dtype::fp64}) {
        if (lower == to_string(t)) return t;
    }
    if (lower == "float32" || lower == "f32") return dtype::fp32;
    if (lower == "float64" || lower == "f64") return dtype::fp64;
    if (lower == "bfloat16") return dtype::bf16;
    if (lower == "float16" || lower == "f16") return dtype::fp16;
    return make_error(status::dtype_mismatch, "unknown dtype '" + std::string(text) + "'");
}

std::size_t dtype_size(dtype t) {
    switch (t) {
        case dtype::int32:
        case dtype::uint32:
        case dtype::fp32: return 4;
        case dtype::bf16:
        case dtype::fp16: return 2;
        case dtype::int8:
        case dtype::uint8: return 1;
        case dtype::fp64: return 8;
    }
    return 1;
}

std::string_view to_string(device_state s) {
    switch (s) {
        case device_state::created: return "created";
        case device_state::loaded: return "loaded";
        case device_state::configured: return "configured";
        case device_state::ready: return "ready";
        case device_state::faulted: return "faulted";
        case device_state::lost: return "lost";
    }
    return "unknown";
}

std::int64_t tensor_desc::elements() const {
    return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}

const tensor_desc* submodel_desc::input(std::string_view n) const {
    auto it = std::find_if(inputs.begin(), inputs.end(), [&](const auto& t) { return t.name == n; });
    return it == inputs.end() ? nullptr : &*it;
}

const tensor_desc* submodel_desc::output(std::string_view n) const {
    auto it = std::find_if(outputs.begin(), outputs.end(), [&](const auto& t) { return t.name == n; });
    return it == outputs.end() ? nullptr : &*it;
}

const submodel_desc* package_spec::find(std::string_view exact_name) const {
    auto it = std::find_if(submodels.begin(), submodels.end(), [&](const auto& s) { return s.name == exact_name; });
    return it == submodels.end() ? nullptr : &*it;
}

const submodel_desc* package_spec::first_of(submodel_kind kind) const {
    auto it = std::find_if(submodels.begin(), submodels.end(), [&](const auto& s) { return s.kind == kind; });
    return it == submodels.end() ? nullptr : &*it;
}

std::uint64_t package_spec::parameter_bytes(std::uint32_t chip) const {
    if (chip >= chips.size()) return 0;
    return chips[chip].parameter_dram_bytes + chips[chip].parameter_sram_bytes;
}

std::uint64_t package_spec::total_parameter_bytes() const {
    std::uint64_t total = 0;
    for (std::uint32_t c = 0; c < chips.size(); ++c) total += parameter_bytes(c);
    return total;
}

namespace {
bool overlaps(std::uint64_t a, std::uint64_t b, std::uint64_t size) { return a < b + size && b < a + size; }

void_result validate_tensor(const submodel_desc& sm, const tensor_desc& t) {
    const std::string where = sm.name + "/" + t.name;
    if (t.shape.empty() || std::any_of(t.shape.begin(), t.shape.end(), [](auto d) { return d <= 0; }))
        return make_error(status::package_invalid, where + ": empty or non-positive shape");
    if (t.bytes != static_cast<std::uint64_t>(t.elements()) * dtype_size(t.type))
        return make_error(status::shape_mismatch, where + ": bytes disagree with shape x dtype");
    if (overlaps(t.ping_address, t.pong_address, t.bytes))
        return make_error(status::package_invalid, where + ": ping and pong buffers alias");
    return {};
}
}  // namespace

void_result validate(const package_spec& spec) {
    if (spec.submodels.empty()) return make_error(status::package_invalid, "package has no submodels");
    if (spec.vocab_size <= 0 || spec.context <= 0) return make_error(status::package_invalid, "vocab/context not positive");
    if (spec.chip_count == 0 || spec.chips.size() != spec.chip_count)
        return make_error(status::package_invalid, "chip memory list does not match chip_count");
    if (spec.kv.capacity_tokens() <= 0 || spec.kv.block_tokens <= 0 || spec.kv.bytes_per_token() <= 0)
        return make_error(status::package_invalid, "KV layout incomplete");
    for (std::size_t i = 0; i < spec.submodels.size(); ++i) {
        const auto& sm = spec.submodels[i];
        for (std::size_t j = 0; j < i; ++j) {
            if (spec.submodels[j].name == sm.name)
                return make_error(status::package_invalid, "duplicate submodel name '" + sm.name + "'");
        }
        if (sm.inputs.empty() || sm.outputs.empty())
            return make_error(status::package_invalid, sm.name + ": no inputs or outputs");
        if (sm.max_tokens <= 0) return make_error(status::package_invalid, sm.name + ": max_tokens not positive");
        if (sm.batch <= 0) return make_error(status::package_invalid, sm.name + ": batch not positive");
        for (const auto* list : {&sm.inputs, &sm.outputs}) {
            for (const auto& t : *list) {
                if (auto r = validate_tensor(sm, t); !r) return r;
            }
        }
        bool has_cur = false, has_past = false;
        for (const auto& c : sm.csrs) {
            has_cur |= c.name == k_csr_cur_seq_len;
            has_past |= c.name == k_csr_past_kv_len;
        }
        if (!has_cur || !has_past) return make_error(status::package_invalid, sm.name + ": CSR registers missing");
    }
    return {};
}

}  // namespace calserve::device
