// Gate C: cross-file consistency (parameter segments, reservations, I/O, op maps, commands).
#include <algorithm>

#include "model/package/json_read.hpp"
#include "model/package/validate_internal.hpp"

namespace calserve::model::package {

namespace {

bool in_window(std::uint64_t base, std::uint64_t bytes, std::uint64_t addr, std::uint64_t size) {
    return addr >= base && size <= bytes && addr - base <= bytes - size;
}

bool inside(const reservation& r, std::uint64_t addr, std::uint64_t size) {
    return in_window(r.dram_base, r.dram_bytes, addr, size) || in_window(r.sram_base, r.sram_bytes, addr, size) ||
           in_window(r.sync_base, r.sync_bytes, addr, size);
}

std::string range_text(std::uint64_t addr, std::uint64_t size) { return to_hex(addr) + "+" + std::to_string(size); }

void check_chip_segments(validation_context& c, const param_file& f, std::uint32_t chip) {
    chip_param_figures fig{chip, f.file, f.size_bytes, 0, 0, false};
    std::vector<const reservation_file::segment_row*> segs;
    for (const auto& s : c.reservation->segments)
        if (s.chip_mask == f.chip_mask) segs.push_back(&s);
    std::sort(segs.begin(), segs.end(), [](auto* a, auto* b) { return a->file_offset < b->file_offset; });
    std::uint64_t next = 0;
    bool contiguous = true;
    for (const auto* s : segs) {
        const auto off = static_cast<std::uint64_t>(s->file_offset), size = static_cast<std::uint64_t>(s->size);
        if (off > f.size_bytes || size > f.size_bytes - off)
            c.add("C_PARAM_OFFSET_OUT_OF_FILE", severity::error, 'C', "model_memory_reserved_info.txt",
                  s->name + ": offset " + to_hex(off) + " + " + std::to_string(size) + " past " + f.file);
        if (off != next) contiguous = false;
        next = off + size;
        (s->kind == param_segment::memory::sram ? fig.sram_bytes : fig.dram_bytes) += size;
        const bool ok = s->kind == param_segment::memory::sram
                            ? in_window(c.pkg.reserved.sram_base, c.pkg.reserved.sram_bytes, s->addr, size)
                            : in_window(c.pkg.reserved.dram_base, c.pkg.reserved.dram_bytes, s->addr, size);
        if (!ok)
            c.add("C_ADDRESS_OUT_OF_RESERVATION", severity::error, 'C', "model_memory_reserved_info.txt",
                  s->name + " at " + range_text(s->addr, size) + " leaves its reservation");
    }
    fig.closes = contiguous && next == f.size_bytes && fig.dram_bytes == f.dram_bytes && fig.sram_bytes == f.sram_bytes;
    if (!fig.closes)
        c.add("C_PARAM_SEGMENTS_NOT_CLOSED", severity::error, 'C', "model_memory_reserved_info.txt",
              "segments of " + f.file + " (mask " + to_hex(f.chip_mask) + ") sum to DRAM " +
                  std::to_string(fig.dram_bytes) + " + SRAM " + std::to_string(fig.sram_bytes) + ", file " +
                  std::to_string(f.size_bytes));
    c.report->figures.params.push_back(fig);
    c.report->figures.param_bytes_total += f.size_bytes;
}

void check_parameters(validation_context& c) {
    if (!c.reservation) return;
    const auto& r = *c.reservation;
    const auto& m = c.pkg.reserved;
    if (r.reserved.dram_base != m.dram_base || r.reserved.dram_bytes != m.dram_bytes ||
        r.reserved.sram_base != m.sram_base || r.reserved.sram_bytes != m.sram_bytes)
        c.add("C_RESERVATION_MISMATCH", severity::error, 'C', "model_memory_reserved_info.txt",
              "reservation windows differ from the manifest");
    for (std::uint32_t i = 0; i < c.pkg.params.size(); ++i) {
        const auto& f = c.pkg.params[i];
        auto row = std::find_if(r.param_files.begin(), r.param_files.end(), [&](auto& x) { return x.name == f.file; });
        if (f.chip_mask != (1u << i) || row == r.param_files.end() || row->chip_mask != f.chip_mask)
            c.add("C_CHIP_MASK_MISMATCH", severity::error, 'C', "model_memory_reserved_info.txt",
                  f.file + ": chip mask disagrees with chip " + std::to_string(i));
        else if (static_cast<std::uint64_t>(row->size) != f.size_bytes)
            c.add("C_PARAM_SIZE_MISMATCH", severity::error, 'C', "model_memory_reserved_info.txt",
                  f.file + ": size differs from the manifest");
        check_chip_segments(c, f, i);
    }
    for (const auto& s : r.segments)
        if (std::none_of(c.pkg.params.begin(), c.pkg.params.end(), [&](auto& f) { return f.chip_mask == s.chip_mask; }))
            c.add("C_CHIP_MASK_MISMATCH", severity::error, 'C', "model_memory_reserved_info.txt",
                  s.name + ": chip mask " + to_hex(s.chip_mask) + " matches no parameter file");
}

bool same_tensor(const submodel_file::tensor_row& a, const tensor_spec& b) {
    return a.name == b.name && a.shape == b.shape && parse_dtype(a.dtype) == b.type &&
           static_cast<std::uint64_t>(a.size) == b.byte_size && a.ping == b.ping_addr && a.pong == b.pong_addr;
}

void check_alias(validation_context& c, const std::string& file, const submodel_file& f) {
    struct buf {
        std::string what;
        std::uint64_t addr, size;
    };
    std::vector<buf> bufs;
    for (const auto* list : {&f.inputs, &f.outputs})
        for (const auto& t : *list) {
            bufs.push_back({t.name + ".ping", t.ping, static_cast<std::uint64_t>(t.size)});
            bufs.push_back({t.name + ".pong", t.pong, static_cast<std::uint64_t>(t.size)});
        }
    for (std::size_t i = 0; i < bufs.size(); ++i) {
        for (std::size_t j = i + 1; j < bufs.size(); ++j)
            if (bufs[i].addr < bufs[j].addr + bufs[j].size && bufs[j].addr < bufs[i].addr + bufs[i].size)
                c.add("C_PING_PONG_ALIAS", severity::error, 'C', file, bufs[i].what + " overlaps " + bufs[j].what);
    }
}

// One line per CSR and batch row: row b of a CSR at the manifest's base offset + 4*b.
void check_csr_rows(validation_context& c, const parsed_submodel& s, const std::string& file) {
    const auto& f = *s.info;
    for (const auto& csr : s.manifest->csrs)
        for (std::int64_t row = 0; row < static_cast<std::int64_t>(s.manifest->batch); ++row) {
            const std::uint64_t want = csr.offset + static_cast<std::uint64_t>(row) * k_csr_row_stride;
            auto it = std::find_if(f.csrs.begin(), f.csrs.end(), [&](auto& x) { return x.name == csr.name && x.row == row; });
            if (it == f.csrs.end() || it->offset != want || it->type != csr.type)
                c.add("C_CSR_MISMATCH", severity::error, 'C', file,
                      csr.name + "[" + std::to_string(row) + "] missing, or its offset is not " + to_hex(want) +
                          " or its dtype differs from the manifest");
        }
    for (const auto& line : f.csrs)
        if (line.row >= static_cast<std::int64_t>(s.manifest->batch) || !s.manifest->csr(line.name))
            c.add("C_CSR_MISMATCH", severity::error, 'C', file,
                  line.name + "[" + std::to_string(line.row) + "] is not a register of this batch-" +
                      std::to_string(s.manifest->batch) + " submodel");
}

// I/O buffers of different submodels never overlap, so any two jobs can be in flight at once;
// the one exception is document 000's plan, whose batch-1 decode reuses the start of the prefill's
// input window (decode position ping 0xc0000000 = prefill token ping).
void check_cross_alias(validation_context& c) {
    struct buf {
        const parsed_submodel* sub;
        std::string what;
        std::uint64_t addr, size;
    };
    std::vector<buf> bufs;
    for (const auto& s : c.subs) {
        if (!s.info) continue;
        for (const auto* list : {&s.info->inputs, &s.info->outputs})
            for (const auto& t : *list)
                for (auto [slot, addr] : {std::pair{".ping", t.ping}, std::pair{".pong", t.pong}})
                    bufs.push_back({&s, s.manifest->name + "/" + t.name + slot, addr, static_cast<std::uint64_t>(t.size)});
    }
    auto documented = [](const submodel& a, const submodel& b) {
        return a.role != b.role && (a.role == submodel_role::prefill ? b.batch : a.batch) == 1;
    };
    for (std::size_t i = 0; i < bufs.size(); ++i)
        for (std::size_t j = i + 1; j < bufs.size(); ++j) {
            const auto &a = bufs[i], &b = bufs[j];
            if (a.sub == b.sub || documented(*a.sub->manifest, *b.sub->manifest)) continue;
            if (a.addr < b.addr + b.size && b.addr < a.addr + a.size)
                c.add("C_PING_PONG_ALIAS", severity::error, 'C', a.sub->manifest->dir + "/submodel_memory_reserved_info.txt",
                      a.what + " overlaps " + b.what);
        }
}

void check_io(validation_context& c, parsed_submodel& s) {
    if (!s.info) return;
    const auto& f = *s.info;
    const std::string file = s.manifest->dir + "/submodel_memory_reserved_info.txt";
    if (f.name != s.manifest->name)
        c.add("C_SUBMODEL_NAME_MISMATCH", severity::error, 'C', file, "smodel_name '" + f.name + "' != manifest '" +
                                                                          s.manifest->name + "'");
    auto compare = [&](const std::vector<submodel_file::tensor_row>& rows, const std::vector<tensor_spec>& specs) {
        if (rows.size() != specs.size())
            return c.add("C_IO_MISMATCH", severity::error, 'C', file, "I/O count differs from the manifest");
        for (std::size_t i = 0; i < rows.size(); ++i) {
            if (!same_tensor(rows[i], specs[i]))
                c.add("C_IO_MISMATCH", severity::error, 'C', file, rows[i].port + " differs from the manifest");
            for (auto a : {rows[i].ping, rows[i].pong})
                if (!inside(c.pkg.reserved, a, static_cast<std::uint64_t>(rows[i].size)))
                    c.add("C_ADDRESS_OUT_OF_RESERVATION", severity::error, 'C', file,
                          rows[i].name + " buffer at " + range_text(a, static_cast<std::uint64_t>(rows[i].size)));
        }
    };
    compare(f.inputs, s.manifest->inputs);
    compare(f.outputs, s.manifest->outputs);
    check_alias(c, file, f);
    check_csr_rows(c, s, file);
    for (const auto& [name, mask] : f.file_masks) {
        auto pos = name.find("chip");
        const std::uint32_t chip = pos == std::string::npos ? 0 : static_cast<std::uint32_t>(name[pos + 4] - '0');
        if (chip >= c.pkg.topo.chips || mask != (1u << chip))
            c.add("C_CHIP_MASK_MISMATCH", severity::error, 'C', file, name + " has chip mask " + to_hex(mask));
    }
}

void check_op_map(validation_context& c, parsed_submodel& s) {
    if (!s.ops) return;
    const std::string file = op_map_name(c.pkg, *s.manifest);
    if (s.ops->submodel != s.manifest->name)
        c.add("C_SUBMODEL_NAME_MISMATCH", severity::error, 'C', file, "op map names '" + s.ops->submodel + "'");
    std::size_t outside = 0;
    std::string first;
    for (const auto& op : s.ops->ops)
        for (const auto* list : {&op.inputs, &op.outputs})
            for (const auto& t : *list)
                if (!inside(c.pkg.reserved, t.addr, t.size) && outside++ == 0) first = op.name + " " + range_text(t.addr, t.size);
    if (outside)
        c.add("C_ADDRESS_OUT_OF_RESERVATION", severity::error, 'C', file,
              std::to_string(outside) + " tensor(s) leave the reservation, first " + first);
    const std::uint32_t chip = s.ops->chip;
    if (chip < s.profparts.size() && s.profparts[chip]) {
        const auto& pp = *s.profparts[chip];
        bool same = pp.size() == s.ops->ops.size();
        for (std::size_t i = 0; same && i < pp.size(); ++i)
            same = pp[i].type == s.ops->ops[i].type && pp[i].name == s.ops->ops[i].name;
        if (!same)
            c.add("C_OP_MAP_PROFPARTS_MISMATCH", severity::error, 'C', file,
                  "op list differs from " + profparts_name(c.pkg, *s.manifest, chip));
    }
}

// "<dir>/pld_cpu_chip0_runtime_cmds_ping.txt" -> "<dir>/pld_cpu_chip0_ping.bin"
std::string binary_path_of(const std::string& text_path) {
    const std::string marker = "_runtime_cmds_";
    const auto at = text_path.find(marker);
    if (at == std::string::npos || !text_path.ends_with(".txt")) return {};
    std::string out = text_path.substr(0, at);
    out += '_';
    out.append(text_path, at + marker.size(), text_path.size() - at - marker.size() - 4);
    out += ".bin";
    return out;
}

void check_commands(validation_context& c, parsed_submodel& s) {
    for (const auto& [path, text] : s.text_cmds) {
        const auto bin_path = binary_path_of(path);
        auto it = s.bin_cmds.find(bin_path);
        if (it != s.bin_cmds.end() && (it->second.cmds != text.cmds || it->second.chip != text.chip))
            c.add("C_CMD_TEXT_BINARY_MISMATCH", severity::error, 'C', bin_path, "binary differs from " + path);
        if (text.submodel != s.manifest->name)
            c.add("C_SUBMODEL_NAME_MISMATCH", severity::error, 'C', path, "header names '" + text.submodel + "'");
        for (const auto& cmd : text.cmds) {
            if (cmd.op != cmd_op::d2d && cmd.op != cmd_op::d2d_run) continue;
            const std::uint64_t extent = cmd.count * cmd.data_size;
            if (cmd.tar_chip >= c.pkg.topo.chips || !inside(c.pkg.reserved, cmd.src, extent) ||
                !inside(c.pkg.reserved, cmd.dst, extent)) {
                c.add("C_D2D_OUT_OF_RANGE", severity::error, 'C', path, "D2D descriptor leaves the reservation or chip set");
                break;
            }
        }
    }
}

void check_yaml_shapes(validation_context& c) {
    if (!c.yaml) return;
    for (const auto& m : c.pkg.submodels) {
        auto prof = c.yaml->shapes.find(m.dir);
        for (const auto* list : {&m.inputs, &m.outputs})
            for (const auto& t : *list) {
                if (prof == c.yaml->shapes.end() || !prof->second.contains(t.name) || prof->second.at(t.name) != t.shape)
                    c.add("C_IO_MISMATCH", severity::error, 'C', model_yaml_name(c.pkg),
                          m.dir + "." + t.name + " shape differs from the manifest");
            }
    }
}

}  // namespace

void gate_cross(validation_context& c) {
    check_parameters(c);
    for (auto& s : c.subs) {
        check_io(c, s);
        check_op_map(c, s);
        check_commands(c, s);
    }
    check_cross_alias(c);
    check_yaml_shapes(c);
}

}  // namespace calserve::model::package
