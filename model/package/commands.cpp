// Runtime command streams: generation and the text/binary forms.
#include "model/package/commands.hpp"

#include <array>
#include <cstring>
#include <sstream>

#include "model/package/json_read.hpp"

namespace calserve::model::package {

namespace {

constexpr std::array<std::pair<cmd_op, std::string_view>, 6> k_ops{{{cmd_op::csr_write, "CSR_WRITE"},
                                                                     {cmd_op::launch, "LAUNCH"},
                                                                     {cmd_op::sync, "SYNC"},
                                                                     {cmd_op::d2d, "D2D"},
                                                                     {cmd_op::d2d_run, "D2D_RUN"},
                                                                     {cmd_op::done, "DONE"}}};
constexpr std::string_view k_bin_magic = "CALCMDB1";
constexpr std::size_t k_bin_header = 8 + 4 * 4;
constexpr std::size_t k_bin_record = 2 + 2 + 4 + 8 * 4;

void cpu_stream(command_stream& out, const package& p, const submodel& sm) {
    for (const auto& c : sm.csrs)
        for (std::uint64_t row = 0; row < sm.batch; ++row)
            out.cmds.push_back({cmd_op::csr_write, 1, c.offset + row * k_csr_row_stride, 0, 4, 0});
    for (std::uint64_t ccu = 0; ccu < p.topo.calcores_per_chip; ++ccu)
        out.cmds.push_back({cmd_op::launch, 1, ccu, 0, 0, 0});
    for (std::uint32_t l = 0; l < p.kv.layers; ++l)
        out.cmds.push_back({cmd_op::sync, 1, l, p.reserved.sync_base, p.reserved.sync_bytes, 0});
    out.cmds.push_back({cmd_op::done, 1, 0, 0, 0, 0});
}

void pld_stream(command_stream& out, const preset_spec& s, const package& p, const submodel& sm, std::uint32_t chip) {
    const auto a = plan_addresses(s, p);
    const std::uint32_t peer = (chip + 1) % std::max<std::uint32_t>(s.chips, 1);
    const std::uint32_t layers = std::max<std::uint32_t>(s.layers, 1);
    if (s.chips > 1 && sm.role == submodel_role::prefill && chip < s.prefill_d2d.size()) {
        for (std::uint32_t l = 0; l < layers; ++l)
            for (const auto& b : s.prefill_d2d[chip]) {
                const std::uint64_t n = b.count / layers + (l < b.count % layers ? 1 : 0);
                if (n == 0) continue;
                out.cmds.push_back({n == 1 ? cmd_op::d2d : cmd_op::d2d_run, n, a.prefill_ws_base, a.prefill_ws_base,
                                    b.size, peer});
            }
        if (chip == 0)
            for (auto size : s.d2d_singletons_chip0)
                out.cmds.push_back({cmd_op::d2d, 1, a.prefill_ws_base, a.prefill_ws_base, size, peer});
    } else if (s.chips > 1) {
        const std::uint64_t hidden_bytes = std::uint64_t{s.hidden} * 2 * std::max<std::uint32_t>(sm.batch, 1);
        for (std::uint32_t l = 0; l < 2 * layers; ++l)
            out.cmds.push_back({cmd_op::d2d, 1, a.decode_sram_base, a.decode_sram_base, hidden_bytes, peer});
    }
    out.cmds.push_back({cmd_op::done, 1, 0, 0, 0, 0});
}

template <class T>
void put(std::string& out, T v) {
    char buf[sizeof(T)];
    std::memcpy(buf, &v, sizeof(T));
    out.append(buf, sizeof(T));
}
template <class T>
T get(std::string_view in, std::size_t at) {
    T v;
    std::memcpy(&v, in.data() + at, sizeof(T));
    return v;
}

std::optional<cmd_op> parse_op(std::string_view s) {
    for (const auto& [op, name] : k_ops)
        if (name == s) return op;
    return std::nullopt;
}

std::vector<std::string_view> split_ws(std::string_view line) {
    std::vector<std::string_view> out;
    std::size_t i = 0;
    while (i < line.size()) {
        while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
        std::size_t j = i;
        while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
        if (j > i) out.push_back(line.substr(i, j - i));
        i = j;
    }
    return out;
}

// "# submodel=X chip=0 engine=cpu slot=ping"
bool parse_header(std::string_view line, command_stream& s) {
    bool any = false;
    for (auto tok : split_ws(line.substr(1))) {
        auto eq = tok.find('=');
        if (eq == std::string_view::npos) continue;
        auto key = tok.substr(0, eq), val = tok.substr(eq + 1);
        if (key == "submodel") s.submodel = std::string(val), any = true;
        if (key == "engine") s.engine = std::string(val);
        if (key == "slot") s.slot = std::string(val);
        if (key == "chip") s.chip = static_cast<std::uint32_t>(parse_unsigned(val).value_or(0));
    }
    return any;
}

result<command> parse_command(std::string_view line, std::size_t expect_index, std::size_t line_no) {
    auto bad = [&](const std::string& m) {
        return make_error(status::package_invalid, "runtime cmds line " + std::to_string(line_no) + ": " + m);
    };
    auto toks = split_ws(line);
    if (toks.size() < 2) return bad("expected '<index> <OP> key=value...'");
    auto idx = parse_unsigned(toks[0]);
    if (!idx || *idx != expect_index) return bad("index out of order");
    auto op = parse_op(toks[1]);
    if (!op) return bad("unknown opcode '" + std::string(toks[1]) + "'");
    command c{*op, 1, 0, 0, 0, 0};
    for (std::size_t i = 2; i < toks.size(); ++i) {
        auto eq = toks[i].find('=');
        if (eq == std::string_view::npos) return bad("expected key=value");
        auto key = toks[i].substr(0, eq);
        auto v = parse_unsigned(toks[i].substr(eq + 1));
        if (!v) return bad("malformed value for " + std::string(key));
        if (key == "count") c.count = *v;
        else if (key == "src" || key == "offset" || key == "ccu" || key == "id") c.src = *v;
        else if (key == "dst" || key == "addr") c.dst = *v;
        else if (key == "dataSize" || key == "size") c.data_size = *v;
        else if (key == "tarChip") c.tar_chip = static_cast<std::uint32_t>(*v);
        else return bad("unknown key " + std::string(key));
    }
    if (c.op == cmd_op::d2d_run && c.count == 0) return bad("D2D_RUN with count 0");
    if ((c.op == cmd_op::d2d || c.op == cmd_op::d2d_run) && c.data_size == 0) return bad("D2D without dataSize");
    return c;
}

}  // namespace

std::string_view to_string(cmd_op op) {
    for (const auto& [o, name] : k_ops)
        if (o == op) return name;
    return "?";
}

command_stream build_commands(const preset_spec& s, const package& p, const submodel& m, std::uint32_t chip,
                              std::string_view engine, std::string_view slot) {
    command_stream out;
    out.submodel = m.name;
    out.chip = chip;
    out.engine = std::string(engine);
    out.slot = std::string(slot);
    if (engine == "cpu") cpu_stream(out, p, m);
    else pld_stream(out, s, p, m, chip);
    return out;
}

std::string write_commands_text(const command_stream& s) {
    std::ostringstream out;
    out << "# calbin runtime commands v1\n# submodel=" << s.submodel << " chip=" << s.chip << " engine=" << s.engine
        << " slot=" << s.slot << "\n";
    for (std::size_t i = 0; i < s.cmds.size(); ++i) {
        const auto& c = s.cmds[i];
        out << i << ' ' << to_string(c.op);
        switch (c.op) {
            case cmd_op::csr_write: out << " offset=" << to_hex(c.src) << " size=" << c.data_size; break;
            case cmd_op::launch: out << " ccu=" << c.src; break;
            case cmd_op::sync: out << " id=" << c.src << " addr=" << to_hex(c.dst) << " size=" << c.data_size; break;
            case cmd_op::d2d_run: out << " count=" << c.count; [[fallthrough]];
            case cmd_op::d2d:
                out << " src=" << to_hex(c.src) << " dst=" << to_hex(c.dst) << " dataSize=" << to_hex(c.data_size)
                    << " tarChip=" << c.tar_chip;
                break;
            case cmd_op::done: break;
        }
        out << '\n';
    }
    return out.str();
}

result<command_stream> parse_commands_text(std::string_view text) {
    command_stream s;
    bool header = false;
    std::size_t line_no = 0;
    while (!text.empty()) {
        auto nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
        ++line_no;
        if (line.empty()) continue;
        if (line[0] == '#') {
            header = parse_header(line, s) || header;
            continue;
        }
        auto c = parse_command(line, s.cmds.size(), line_no);
        if (!c) return c.error();
        s.cmds.push_back(c.value());
    }
    if (!header || s.engine.empty() || s.slot.empty())
        return make_error(status::package_invalid, "runtime cmds: missing '# submodel=... engine=... slot=...' header");
    return s;
}

std::string write_commands_binary(const command_stream& s) {
    std::string out(k_bin_magic);
    put<std::uint32_t>(out, 1);
    put<std::uint32_t>(out, static_cast<std::uint32_t>(s.cmds.size()));
    put<std::uint32_t>(out, s.chip);
    put<std::uint32_t>(out, s.slot == "pong" ? 1u : 0u);
    for (const auto& c : s.cmds) {
        put<std::uint16_t>(out, static_cast<std::uint16_t>(c.op));
        put<std::uint16_t>(out, 0);
        put<std::uint32_t>(out, c.tar_chip);
        put<std::uint64_t>(out, c.count);
        put<std::uint64_t>(out, c.src);
        put<std::uint64_t>(out, c.dst);
        put<std::uint64_t>(out, c.data_size);
    }
    return out;
}

result<command_stream> parse_commands_binary(std::string_view in) {
    auto bad = [](const std::string& m) { return make_error(status::package_invalid, "command binary: " + m); };
    if (in.size() < k_bin_header || in.substr(0, 8) != k_bin_magic) return bad("bad magic");
    if (get<std::uint32_t>(in, 8) != 1) return bad("unsupported version");
    const auto n = get<std::uint32_t>(in, 12);
    if ((in.size() - k_bin_header) != std::uint64_t{n} * k_bin_record) return bad("record count does not match size");
    command_stream s;
    s.chip = get<std::uint32_t>(in, 16);
    s.slot = get<std::uint32_t>(in, 20) ? "pong" : "ping";
    for (std::uint32_t i = 0; i < n; ++i) {
        const std::size_t at = k_bin_header + std::size_t{i} * k_bin_record;
        command c;
        c.op = static_cast<cmd_op>(get<std::uint16_t>(in, at));
        if (to_string(c.op) == "?") return bad("unknown opcode in record " + std::to_string(i));
        c.tar_chip = get<std::uint32_t>(in, at + 4);
        c.count = get<std::uint64_t>(in, at + 8);
        c.src = get<std::uint64_t>(in, at + 16);
        c.dst = get<std::uint64_t>(in, at + 24);
        c.data_size = get<std::uint64_t>(in, at + 32);
        s.cmds.push_back(c);
    }
    return s;
}

d2d_stats d2d_histogram(const command_stream& s) {
    d2d_stats st;
    for (const auto& c : s.cmds) {
        if (c.op != cmd_op::d2d && c.op != cmd_op::d2d_run) continue;
        st.entries += c.count;
        st.bytes += c.count * c.data_size;
        st.by_size[c.data_size] += c.count;
    }
    return st;
}

}  // namespace calserve::model::package
