// Text forms of the op lists: *_op_io_buf_ptr.yaml (yaml-cpp) and *.profparts.
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <sstream>

#include "model/package/json_read.hpp"
#include "model/package/op_map.hpp"

namespace calserve::model::package {

std::string_view to_string(tensor_kind k) {
    switch (k) {
        case tensor_kind::input: return "input";
        case tensor_kind::constant: return "const";
        case tensor_kind::activation: return "activation";
    }
    return "?";
}

namespace {

void write_tensor(std::ostringstream& out, const op_tensor& t) {
    out << "  - {kind: " << to_string(t.kind) << ", addr: " << to_hex(t.addr) << ", size: " << t.size << ", shape: [";
    for (std::size_t i = 0; i < t.shape.size(); ++i) out << (i ? ", " : "") << t.shape[i];
    out << "], dtype: " << t.dtype;
    if (t.producer >= 0) out << ", producer: " << t.producer;
    out << "}\n";
}

std::optional<tensor_kind> parse_kind(const std::string& s) {
    if (s == "input") return tensor_kind::input;
    if (s == "const") return tensor_kind::constant;
    if (s == "activation") return tensor_kind::activation;
    return std::nullopt;
}

std::optional<std::uint64_t> yaml_u64(const YAML::Node& n) {
    if (!n || !n.IsScalar()) return std::nullopt;
    const auto& s = n.Scalar();
    if (!s.empty() && s[0] == '-') return std::nullopt;
    return parse_unsigned(s);
}

result<op_tensor> parse_tensor(const YAML::Node& n, const std::string& where) {
    auto bad = [&](const std::string& m) { return make_error(status::package_invalid, where + ": " + m); };
    if (!n.IsMap()) return bad("tensor is not a mapping");
    op_tensor t;
    auto kind = parse_kind(n["kind"] ? n["kind"].as<std::string>() : "");
    if (!kind) return bad("unknown tensor kind");
    t.kind = *kind;
    auto addr = yaml_u64(n["addr"]);
    auto size = yaml_u64(n["size"]);
    if (!addr || !size) return bad("addr/size missing or not a non-negative integer");
    t.addr = *addr;
    t.size = *size;
    if (!n["shape"] || !n["shape"].IsSequence()) return bad("shape missing");
    std::uint64_t elems = 1;
    for (const auto& d : n["shape"]) {
        auto v = yaml_u64(d);
        if (!v || *v == 0) return bad("shape dimension not a positive integer");
        t.shape.push_back(static_cast<std::int64_t>(*v));
        elems *= *v;
    }
    t.dtype = n["dtype"] ? n["dtype"].as<std::string>() : "";
    auto dt = parse_dtype(t.dtype);
    if (!dt) return bad("unknown dtype '" + t.dtype + "'");
    if (elems * dtype_bytes(*dt) != t.size) return bad("size != product(shape) x dtype bytes");
    if (n["producer"]) {
        auto pr = yaml_u64(n["producer"]);
        if (!pr) return bad("producer not an op id");
        t.producer = static_cast<std::int64_t>(*pr);
    }
    return t;
}

result<op_entry> parse_op(const YAML::Node& n, std::uint32_t index) {
    const std::string where = "op " + std::to_string(index);
    if (!n.IsMap()) return make_error(status::package_invalid, where + ": not a mapping");
    op_entry e;
    auto id = yaml_u64(n["id"]);
    if (!id || *id != index) return make_error(status::package_invalid, where + ": id out of order");
    e.id = index;
    e.type = n["type"] ? n["type"].as<std::string>() : "";
    e.name = n["name"] ? n["name"].as<std::string>() : "";
    if (e.type.empty() || e.name.empty()) return make_error(status::package_invalid, where + ": type/name missing");
    e.layer = n["layer"] ? n["layer"].as<std::int32_t>() : -1;
    for (auto* list : {&e.inputs, &e.outputs}) {
        const char* key = list == &e.inputs ? "inputs" : "outputs";
        if (!n[key]) continue;
        if (!n[key].IsSequence()) return make_error(status::package_invalid, where + ": " + key + " not a list");
        for (const auto& t : n[key]) {
            auto parsed = parse_tensor(t, where + "." + key);
            if (!parsed) return parsed.error();
            if (parsed->producer >= static_cast<std::int64_t>(index))
                return make_error(status::package_invalid, where + ": producer is not an earlier op");
            list->push_back(std::move(parsed.value()));
        }
    }
    return e;
}

}  // namespace

std::string write_op_map_yaml(const op_map& m) {
    std::ostringstream out;
    out << "schema: calbin-op-io/1\nsubmodel: " << m.submodel << "\nchip: " << m.chip << "\nops:\n";
    for (const auto& op : m.ops) {
        out << "- id: " << op.id << "\n  type: " << op.type << "\n  name: " << op.name << "\n  layer: " << op.layer
            << "\n  inputs:\n";
        for (const auto& t : op.inputs) write_tensor(out, t);
        out << "  outputs:\n";
        for (const auto& t : op.outputs) write_tensor(out, t);
    }
    return out.str();
}

result<op_map> parse_op_map_yaml(std::string_view text) {
    try {
        YAML::Node root = YAML::Load(std::string(text));
        if (!root.IsMap()) return make_error(status::package_invalid, "op map: not a mapping");
        if (!root["schema"] || root["schema"].as<std::string>() != "calbin-op-io/1")
            return make_error(status::package_invalid, "op map: unknown schema");
        op_map m;
        m.submodel = root["submodel"] ? root["submodel"].as<std::string>() : "";
        auto chip = yaml_u64(root["chip"]);
        if (m.submodel.empty() || !chip) return make_error(status::package_invalid, "op map: submodel/chip missing");
        m.chip = static_cast<std::uint32_t>(*chip);
        if (!root["ops"] || !root["ops"].IsSequence()) return make_error(status::package_invalid, "op map: ops missing");
        std::uint32_t i = 0;
        for (const auto& n : root["ops"]) {
            auto op = parse_op(n, i++);
            if (!op) return op.error();
            m.ops.push_back(std::move(op.value()));
        }
        return m;
    } catch (const YAML::ParserException& e) {
        return make_error(status::package_invalid, std::string("op map: syntax: ") + e.what());
    } catch (const YAML::Exception& e) {
        return make_error(status::package_invalid, std::string("op map: schema: ") + e.what());
    }
}

std::string write_profparts(const std::vector<op_entry>& ops) {
    std::ostringstream out;
    for (const auto& op : ops) out << op.id << '\t' << op.type << '\t' << op.name << '\t' << op.layer << '\n';
    return out.str();
}

result<std::vector<op_entry>> parse_profparts(std::string_view text) {
    std::vector<op_entry> ops;
    std::size_t line_no = 0;
    while (!text.empty()) {
        auto nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
        ++line_no;
        std::vector<std::string_view> f;
        for (std::size_t pos = 0;;) {
            auto tab = line.find('\t', pos);
            f.push_back(line.substr(pos, tab == std::string_view::npos ? std::string_view::npos : tab - pos));
            if (tab == std::string_view::npos) break;
            pos = tab + 1;
        }
        auto bad = [&](const char* m) {
            return make_error(status::package_invalid, "profparts line " + std::to_string(line_no) + ": " + m);
        };
        if (f.size() != 4) return bad("expected 4 tab-separated fields");
        auto idx = parse_unsigned(f[0]);
        if (!idx || *idx != ops.size()) return bad("index out of order");
        std::int32_t layer = 0;
        auto [p, ec] = std::from_chars(f[3].data(), f[3].data() + f[3].size(), layer);
        if (ec != std::errc{} || p != f[3].data() + f[3].size() || f[1].empty() || f[2].empty())
            return bad("malformed type/name/layer");
        op_entry e;
        e.id = static_cast<std::uint32_t>(*idx);
        e.type = std::string(f[1]);
        e.name = std::string(f[2]);
        e.layer = layer;
        ops.push_back(std::move(e));
    }
    return ops;
}

}  // namespace calserve::model::package
