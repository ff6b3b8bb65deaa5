// Routing counts (see routing_counts.hpp).
#include "model/core/routing_counts.hpp"

#include <boost/json.hpp>

#include "config/json_text.hpp"

namespace calserve::model {
namespace json = boost::json;
namespace {
constexpr std::string_view k_format = "calserve-routing-counts";

error_info bad(const std::string& what) { return make_error(status::parse_error, "routing counts: " + what); }

result<std::uint64_t> count_of(const json::value& v, const std::string& where) {
    if (v.is_uint64()) return v.as_uint64();
    if (v.is_int64() && v.as_int64() >= 0) return static_cast<std::uint64_t>(v.as_int64());
    return bad(where + " must be a non-negative integer");
}

result<std::vector<std::uint64_t>> counts_of(const json::value& v, const std::string& where) {
    if (!v.is_array()) return bad(where + " must be an array");
    std::vector<std::uint64_t> out;
    for (const auto& x : v.as_array()) {
        auto n = count_of(x, where + "[" + std::to_string(out.size()) + "]");
        if (!n) return n.error();
        out.push_back(*n);
    }
    return out;
}

result<std::vector<std::vector<std::uint64_t>>> table_of(const json::value& v) {
    if (!v.is_array()) return bad("counts must be an array of layers");
    std::vector<std::vector<std::uint64_t>> out;
    for (const auto& row : v.as_array()) {
        auto r = counts_of(row, "counts[" + std::to_string(out.size()) + "]");
        if (!r) return r.error();
        if (!out.empty() && r->size() != out.front().size())
            return bad("counts[" + std::to_string(out.size()) + "] has " + std::to_string(r->size()) +
                       " experts, layer 0 has " + std::to_string(out.front().size()));
        out.push_back(std::move(*r));
    }
    return out;
}

}  // namespace

void routing_counts::add(std::size_t layer, std::uint64_t rows, std::span<const std::uint64_t> rows_per_expert) {
    if (layer >= experts.size()) return;
    tokens[layer] += rows;
    auto& row = experts[layer];
    for (std::size_t e = 0; e < row.size() && e < rows_per_expert.size(); ++e) row[e] += rows_per_expert[e];
}

routing_counts make_routing_counts(std::size_t layers, std::size_t num_experts, std::int64_t top_k) {
    routing_counts c;
    c.top_k = top_k;
    c.tokens.assign(layers, 0);
    c.experts.assign(layers, std::vector<std::uint64_t>(num_experts, 0));
    return c;
}

std::string to_json_text(const routing_counts& c) {
    json::array tokens, counts;
    for (auto t : c.tokens) tokens.emplace_back(t);
    for (const auto& row : c.experts) {
        json::array r;
        for (auto n : row) r.emplace_back(n);
        counts.emplace_back(std::move(r));
    }
    return json_text(json::object{{"format", k_format},
                                  {"version", 1},
                                  {"model", c.model},
                                  {"top_k", c.top_k},
                                  {"layers", c.layers()},
                                  {"experts", c.num_experts()},
                                  {"tokens", std::move(tokens)},
                                  {"counts", std::move(counts)}});
}

result<routing_counts> parse_routing_counts(std::string_view text) {
    boost::system::error_code ec;
    const json::value v = json::parse(text, ec);
    if (ec || !v.is_object()) return bad("not a JSON object");
    const auto& o = v.as_object();
    const auto* format = o.if_contains("format");
    if (!format || !format->is_string() || format->as_string() != k_format)
        return bad("\"format\" must be \"" + std::string(k_format) + "\"");
    routing_counts c;
    if (const auto* m = o.if_contains("model"); m && m->is_string()) c.model = std::string(m->as_string());
    const auto* k = o.if_contains("top_k");
    if (!k || !k->is_int64() || k->as_int64() < 1) return bad("\"top_k\" must be a positive integer");
    c.top_k = k->as_int64();
    const auto* counts = o.if_contains("counts");
    if (!counts) return bad("\"counts\" is missing");
    auto table = table_of(*counts);
    if (!table) return table.error();
    c.experts = std::move(*table);
    const auto* tokens = o.if_contains("tokens");
    if (!tokens) return bad("\"tokens\" is missing");
    auto t = counts_of(*tokens, "tokens");
    if (!t) return t.error();
    c.tokens = std::move(*t);
    if (c.tokens.size() != c.layers())
        return bad("\"tokens\" has " + std::to_string(c.tokens.size()) + " layers, \"counts\" " +
                   std::to_string(c.layers()));
    if (c.layers() == 0 || c.num_experts() == 0) return bad("no layers or no experts");
    return c;
}

}  // namespace calserve::model
