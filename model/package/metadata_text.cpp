// Line-oriented metadata files: reservation info, submodel info, version.py.
#include <charconv>
#include <cmath>
#include <sstream>

#include "model/package/json_read.hpp"
#include "model/package/metadata.hpp"

namespace calserve::model::package {

namespace {

using row = std::map<std::string, std::string, std::less<>>;

struct line_item {
    std::size_t line_no = 0;
    std::string key;
    std::string value;
};

// "key: value" lines; '#' comments and blank lines skipped.
result<std::vector<line_item>> split_lines(std::string_view text, std::string_view what) {
    std::vector<line_item> out;
    std::size_t line_no = 0;
    while (!text.empty()) {
        auto nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
        ++line_no;
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
        if (line.empty() || line[0] == '#') continue;
        auto colon = line.find(": ");
        if (colon == std::string_view::npos || colon == 0)
            return make_error(status::package_invalid,
                              std::string(what) + " line " + std::to_string(line_no) + ": expected 'key: value'");
        out.push_back({line_no, std::string(line.substr(0, colon)), std::string(line.substr(colon + 2))});
    }
    return out;
}

result<row> parse_row(const line_item& li, std::string_view what) {
    row r;
    std::string_view v = li.value;
    std::size_t i = 0;
    while (i < v.size()) {
        auto sp = v.find(' ', i);
        auto tok = v.substr(i, sp == std::string_view::npos ? std::string_view::npos : sp - i);
        i = sp == std::string_view::npos ? v.size() : sp + 1;
        if (tok.empty()) continue;
        auto eq = tok.find('=');
        if (eq == std::string_view::npos || eq == 0)
            return make_error(status::package_invalid,
                              std::string(what) + " line " + std::to_string(li.line_no) + ": expected key=value");
        r.emplace(std::string(tok.substr(0, eq)), std::string(tok.substr(eq + 1)));
    }
    return r;
}

std::optional<std::int64_t> parse_signed(std::string_view s) {
    bool neg = !s.empty() && s[0] == '-';
    if (neg) s.remove_prefix(1);
    auto v = parse_unsigned(s);
    if (!v || *v > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
    return neg ? -static_cast<std::int64_t>(*v) : static_cast<std::int64_t>(*v);
}

struct field_reader {
    std::string what;
    std::size_t line_no = 0;
    std::string error;
    const row* r = nullptr;

    std::string str(std::string_view key) {
        auto it = r->find(key);
        if (it == r->end()) fail(key, "missing");
        return it == r->end() ? std::string() : it->second;
    }
    std::int64_t i64(std::string_view key) {
        auto s = str(key);
        auto v = parse_signed(s);
        if (!v && !s.empty()) fail(key, "not an integer");
        return v.value_or(0);
    }
    std::uint64_t u64(std::string_view key) {
        auto s = str(key);
        auto v = parse_unsigned(s);
        if (!v && !s.empty()) fail(key, "not an unsigned integer");
        return v.value_or(0);
    }
    void fail(std::string_view key, std::string_view m) {
        if (error.empty())
            error = what + " line " + std::to_string(line_no) + ": " + std::string(key) + " " + std::string(m);
    }
};

std::optional<std::vector<std::int64_t>> parse_shape(std::string_view s) {
    if (s.size() < 2 || s.front() != '[' || s.back() != ']') return std::nullopt;
    s = s.substr(1, s.size() - 2);
    std::vector<std::int64_t> out;
    while (!s.empty()) {
        auto comma = s.find(',');
        auto v = parse_signed(s.substr(0, comma));
        if (!v) return std::nullopt;
        out.push_back(*v);
        s = comma == std::string_view::npos ? std::string_view{} : s.substr(comma + 1);
    }
    return out;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
    std::string out = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) out += ',';
        out += std::to_string(shape[i]);
    }
    out += ']';
    return out;
}

}  // namespace

std::string write_model_reservation(const preset_spec& s, const package& p) {
    std::ostringstream o;
    o << "# calbin model memory reservation v1\nmodel_name: " << p.model_name << "\nchip_nums: " << p.topo.chips
      << "\ncalcore_nums: " << p.topo.calcores_per_chip << "\ndevice_memory_required: " << s.device_memory_required
      << "\ndram_reserved: addr=" << to_hex(p.reserved.dram_base) << " size=" << p.reserved.dram_bytes
      << "\nsram_reserved: addr=" << to_hex(p.reserved.sram_base) << " size=" << p.reserved.sram_bytes
      << "\nsync_reserved: addr=" << to_hex(p.reserved.sync_base) << " size=" << p.reserved.sync_bytes << "\n";
    for (const auto& f : p.params)
        o << "param_file: name=" << f.file << " chip_mask=" << to_hex(f.chip_mask) << " size=" << f.size_bytes << "\n";
    for (const auto& f : p.params) {
        std::size_t i = 0;
        for (const auto& seg : f.segments) {
            const bool sram = seg.kind == param_segment::memory::sram;
            o << "param_segment: name=seg" << i++ << " chip_mask=" << to_hex(f.chip_mask)
              << " mem=" << (sram ? "SRAM" : "DRAM") << " file_offset=" << to_hex(seg.file_offset)
              << " addr=" << to_hex(seg.device_addr) << " size=" << seg.size << "\n";
        }
    }
    return o.str();
}

namespace {
void read_window(field_reader& f, std::uint64_t& base, std::uint64_t& bytes) {
    base = f.u64("addr");
    bytes = f.u64("size");
}
}  // namespace

result<reservation_file> parse_model_reservation(std::string_view text) {
    auto lines = split_lines(text, "model_memory_reserved_info");
    if (!lines) return lines.error();
    reservation_file out;
    for (const auto& li : lines.value()) {
        field_reader f{"model_memory_reserved_info", li.line_no, {}, nullptr};
        auto scalar = [&]() { return parse_signed(li.value).value_or(-1); };
        if (li.key == "model_name") out.model_name = li.value;
        else if (li.key == "chip_nums") out.chip_nums = scalar();
        else if (li.key == "calcore_nums") out.calcore_nums = scalar();
        else if (li.key == "device_memory_required") out.device_memory_required = li.value;
        else {
            auto r = parse_row(li, f.what);
            if (!r) return r.error();
            f.r = &r.value();
            if (li.key == "dram_reserved") read_window(f, out.reserved.dram_base, out.reserved.dram_bytes);
            else if (li.key == "sram_reserved") read_window(f, out.reserved.sram_base, out.reserved.sram_bytes);
            else if (li.key == "sync_reserved") read_window(f, out.reserved.sync_base, out.reserved.sync_bytes);
            else if (li.key == "param_file")
                out.param_files.push_back({f.str("name"), static_cast<std::uint32_t>(f.u64("chip_mask")), f.i64("size")});
            else if (li.key == "param_segment") {
                reservation_file::segment_row s;
                s.name = f.str("name");
                s.chip_mask = static_cast<std::uint32_t>(f.u64("chip_mask"));
                auto mem = f.str("mem");
                if (mem != "DRAM" && mem != "SRAM") f.fail("mem", "must be DRAM or SRAM");
                s.kind = mem == "SRAM" ? param_segment::memory::sram : param_segment::memory::dram;
                s.file_offset = f.i64("file_offset");
                s.addr = f.u64("addr");
                s.size = f.i64("size");
                out.segments.push_back(std::move(s));
            } else {
                f.fail(li.key, "is not a known key");
            }
        }
        if (!f.error.empty()) return make_error(status::package_invalid, f.error);
    }
    if (out.model_name.empty() || out.reserved.dram_bytes == 0)
        return make_error(status::package_invalid, "model_memory_reserved_info: model_name/dram_reserved missing");
    return out;
}

std::string write_submodel_info(const preset_spec& s, const package& p, const submodel& m,
                                const std::vector<std::string>& files) {
    std::ostringstream o;
    o << "# calbin submodel memory reservation v1\nsmodel_name: " << m.name << "\nsmodel_type: " << m.type_label
      << "\nbatch: " << m.batch << "\nmax_seq_len: " << p.context << "\nchip_nums: " << s.chips
      << "\nchip_mode: " << (s.chips > 1 ? "tp" + std::to_string(s.chips) : std::string("single")) << "\n";
    for (std::uint32_t c = 0; c < s.chips; ++c) o << "tarChip" << c << ": " << c << "\n";
    auto tensor = [&](const char* key, const tensor_spec& t) {
        o << key << ": port=" << t.port << " name=" << t.name << " shape=" << shape_text(t.shape)
          << " dtype=" << to_string(t.type) << " size=" << t.byte_size << " ping=" << to_hex(t.ping_addr)
          << " pong=" << to_hex(t.pong_addr) << "\n";
    };
    for (const auto& t : m.inputs) tensor("input", t);
    for (const auto& t : m.outputs) tensor("output", t);
    for (const auto& c : m.csrs)
        for (std::uint64_t row = 0; row < m.batch; ++row)
            o << "csr: name=" << c.name << "[" << row << "] dtype=" << to_string(c.type)
              << " offset=" << to_hex(c.offset + row * k_csr_row_stride) << "\n";
    for (const auto& f : files) {
        auto pos = f.find("chip");
        std::uint32_t chip = pos == std::string::npos ? 0 : static_cast<std::uint32_t>(f[pos + 4] - '0');
        o << "file: name=" << f << " chip_mask=" << to_hex(1u << chip) << "\n";
    }
    return o.str();
}

namespace {
bool read_submodel_row(const line_item& li, field_reader& f, submodel_file& out) {
    if (li.key == "input" || li.key == "output") {
        submodel_file::tensor_row t;
        t.port = f.str("port");
        t.name = f.str("name");
        t.dtype = f.str("dtype");
        auto shape = parse_shape(f.str("shape"));
        if (!shape) f.fail("shape", "malformed");
        t.shape = shape.value_or(std::vector<std::int64_t>{});
        t.size = f.i64("size");
        t.ping = f.u64("ping");
        t.pong = f.u64("pong");
        (li.key == "input" ? out.inputs : out.outputs).push_back(std::move(t));
    } else if (li.key == "csr") {
        submodel_file::csr_row c;
        c.name = f.str("name");
        if (const auto open = c.name.find('['); open != std::string::npos && c.name.ends_with("]")) {
            auto row = parse_signed(std::string_view(c.name).substr(open + 1, c.name.size() - open - 2));
            if (!row || *row < 0) f.fail("name", "has a malformed row index");
            c.row = row.value_or(0);
            c.name.resize(open);
        }
        auto dt = parse_dtype(f.str("dtype"));
        if (!dt) f.fail("dtype", "unknown");
        c.type = dt.value_or(dtype::uint32);
        c.offset = static_cast<std::uint32_t>(f.u64("offset"));
        out.csrs.push_back(std::move(c));
    } else if (li.key == "file") {
        out.file_masks[f.str("name")] = static_cast<std::uint32_t>(f.u64("chip_mask"));
    } else {
        return false;
    }
    return true;
}
}  // namespace

result<submodel_file> parse_submodel_info(std::string_view text) {
    auto lines = split_lines(text, "submodel_memory_reserved_info");
    if (!lines) return lines.error();
    submodel_file out;
    for (const auto& li : lines.value()) {
        field_reader f{"submodel_memory_reserved_info", li.line_no, {}, nullptr};
        auto scalar = [&]() {
            auto v = parse_signed(li.value);
            if (!v) f.fail(li.key, "not an integer");
            return v.value_or(0);
        };
        if (li.key == "smodel_name") out.name = li.value;
        else if (li.key == "smodel_type") out.type = li.value;
        else if (li.key == "batch") out.batch = scalar();
        else if (li.key == "max_seq_len") out.max_seq_len = scalar();
        else if (li.key == "chip_nums") out.chip_nums = scalar();
        else if (li.key == "chip_mode") out.chip_mode = li.value;
        else if (li.key.starts_with("tarChip")) continue;
        else {
            auto r = parse_row(li, f.what);
            if (!r) return r.error();
            f.r = &r.value();
            if (!read_submodel_row(li, f, out)) f.fail(li.key, "is not a known key");
        }
        if (!f.error.empty()) return make_error(status::package_invalid, f.error);
    }
    if (out.name.empty() || out.type.empty())
        return make_error(status::package_invalid, "submodel_memory_reserved_info: smodel_name/smodel_type missing");
    return out;
}

std::string write_version_py(const preset_spec& s, const package& p) {
    std::ostringstream o;
    o << "# calbin version helper (generated)\nCALBIN_VERSION = \"1.0.0\"\nMODEL_NAME = \"" << p.model_name
      << "\"\nCALCC_COMMIT = \"" << s.calcc_commit << "\"\nTVM_COMMIT = \"" << s.tvm_commit
      << "\"\nCALRT_MIN_VERSION = \"" << p.runtime_version << "\"\n\n\ndef version():\n    return CALBIN_VERSION\n";
    return o.str();
}

result<std::map<std::string, std::string>> parse_version_py(std::string_view text) {
    std::map<std::string, std::string> out;
    std::size_t line_no = 0;
    while (!text.empty()) {
        auto nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
        ++line_no;
        auto eq = line.find(" = ");
        if (line.empty() || line[0] == '#' || line[0] == ' ' || eq == std::string_view::npos) continue;
        auto name = line.substr(0, eq);
        auto value = line.substr(eq + 3);
        const bool upper = std::all_of(name.begin(), name.end(), [](char c) { return (c >= 'A' && c <= 'Z') || c == '_' || (c >= '0' && c <= '9'); });
        if (!upper) continue;
        if (value.size() < 2 || value.front() != '"' || value.back() != '"')
            return make_error(status::package_invalid, "version.py line " + std::to_string(line_no) + ": unquoted value");
        out[std::string(name)] = std::string(value.substr(1, value.size() - 2));
    }
    if (!out.contains("CALBIN_VERSION")) return make_error(status::package_invalid, "version.py: CALBIN_VERSION missing");
    return out;
}

std::optional<double> memory_amount_bytes(std::string_view text) {
    auto sp = text.find(' ');
    if (sp == std::string_view::npos) return std::nullopt;
    double v = 0;
    auto num = text.substr(0, sp);
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
    if (ec != std::errc{} || p != num.data() + num.size() || !std::isfinite(v) || v < 0) return std::nullopt;
    const auto unit = text.substr(sp + 1);
    const std::map<std::string_view, double> units{{"B", 1},       {"KB", 1e3},     {"KiB", 1024.0},
                                                   {"MB", 1e6},    {"MiB", 1048576.0}, {"GB", 1e9},
                                                   {"GiB", 1073741824.0}, {"TB", 1e12}, {"TiB", 1099511627776.0}};
    auto it = units.find(unit);
    if (it == units.end()) return std::nullopt;
    return v * it->second;
}

}  // namespace calserve::model::package
