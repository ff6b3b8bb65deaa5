// Small value helpers of the package model (dtype names and sizes, lookups).
#include "model/package/package.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace calserve::model::package {

namespace {
struct dtype_row {
    dtype type;
    std::string_view name;
    std::uint64_t bytes;
};
constexpr std::array<dtype_row, 7> k_dtypes{{
    {dtype::int32, "INT32", 4},
    {dtype::uint32, "UINT32", 4},
    {dtype::int8, "INT8", 1},
    {dtype::uint8, "UINT8", 1},
    {dtype::bf16, "BF16", 2},
    {dtype::fp16, "FP16", 2},
    {dtype::fp32, "FP32", 4},
}};

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::toupper(static_cast<unsigned char>(x)) == std::toupper(static_cast<unsigned char>(y));
           });
}

template <class Range>
const tensor_spec* find_tensor(const Range& r, std::string_view name) {
    auto it = std::find_if(r.begin(), r.end(), [&](const tensor_spec& t) { return t.name == name; });
    return it == r.end() ? nullptr : &*it;
}
}  // namespace

std::string_view to_string(dtype t) {
    for (const auto& row : k_dtypes)
        if (row.type == t) return row.name;
    return "?";
}

std::optional<dtype> parse_dtype(std::string_view s) {
    for (const auto& row : k_dtypes)
        if (iequals(row.name, s)) return row.type;
    if (iequals(s, "S8")) return dtype::int8;
    if (iequals(s, "U8")) return dtype::uint8;
    return std::nullopt;
}

std::uint64_t dtype_bytes(dtype t) {
    for (const auto& row : k_dtypes)
        if (row.type == t) return row.bytes;
    return 0;
}

bool known_placement(std::string_view p) {
    return std::find(k_placements.begin(), k_placements.end(), p) != k_placements.end();
}

void_result check_placement(std::string_view placement, std::uint32_t chips, std::uint32_t layers, std::uint32_t experts) {
    auto bad = [&](const std::string& why) {
        return make_error(status::package_invalid, "placement '" + std::string(placement) + "': " + why);
    };
    if (!known_placement(placement)) return bad("unknown (tp, ep or pp)");
    if (placement == k_placement_tp) return {};
    const auto n = std::to_string(chips);
    if (chips < 2) return bad("needs two chips or more, the package has " + n);
    if (placement == "ep" && experts == 0) return bad("needs an MoE model (routed experts), this model is dense");
    if (placement == "ep" && experts % chips != 0)
        return bad(std::to_string(experts) + " experts do not divide evenly over " + n + " chips");
    if (placement == "pp" && layers < chips)
        return bad(std::to_string(layers) + " layers cannot fill " + n + " pipeline stages");
    return {};
}

std::string_view to_string(submodel_role r) { return r == submodel_role::prefill ? "prefill" : "decode"; }

std::uint64_t tensor_spec::element_count() const {
    std::uint64_t n = 1;
    for (auto d : shape) n *= d > 0 ? static_cast<std::uint64_t>(d) : 0;
    return n;
}

const tensor_spec* submodel::input(std::string_view semantic_name) const { return find_tensor(inputs, semantic_name); }
const tensor_spec* submodel::output(std::string_view semantic_name) const { return find_tensor(outputs, semantic_name); }

const csr_spec* submodel::csr(std::string_view csr_name) const {
    auto it = std::find_if(csrs.begin(), csrs.end(), [&](const csr_spec& c) { return c.name == csr_name; });
    return it == csrs.end() ? nullptr : &*it;
}

std::uint64_t kv_layout::v_scale_bytes() const { return v_dtype == dtype::int8 ? dtype_bytes(v_scale_dtype) : 0; }

std::uint64_t kv_layout::bytes_per_token_total() const {
    return std::uint64_t{layers} * kv_heads *
           (std::uint64_t{head_dim} * (dtype_bytes(k_dtype) + dtype_bytes(v_dtype)) + v_scale_bytes());
}

const submodel* package::find_submodel(std::string_view exact_name) const {
    auto it = std::find_if(submodels.begin(), submodels.end(), [&](const submodel& s) { return s.name == exact_name; });
    return it == submodels.end() ? nullptr : &*it;
}

const submodel* package::find_role(submodel_role r) const {
    auto it = std::find_if(submodels.begin(), submodels.end(), [&](const submodel& s) { return s.role == r; });
    return it == submodels.end() ? nullptr : &*it;
}

std::vector<const submodel*> package::decode_profiles() const {
    std::vector<const submodel*> out;
    for (const auto& s : submodels)
        if (s.role == submodel_role::decode) out.push_back(&s);
    std::stable_sort(out.begin(), out.end(), [](const submodel* a, const submodel* b) { return a->batch < b->batch; });
    return out;
}

std::uint64_t package::total_param_bytes() const {
    std::uint64_t n = 0;
    for (const auto& c : chips) n += c.param_bytes;
    return n;
}

}  // namespace calserve::model::package
