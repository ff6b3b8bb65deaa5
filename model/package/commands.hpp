#pragma once
//! Runtime command streams (`*_runtime_cmds_{ping,pong}.txt` and their binaries
//! `{cpu,pld_cpu}_chipN_{ping,pong}.bin`) and the ELF files of a package.
//!
//! Role: the packer generates the streams from a preset (including the prefill
//! D2D descriptor histogram of document 000); the validator parses both forms,
//! checks that text and binary agree and derives the D2D histogram by counting
//! `dataSize` entries (a `D2D_RUN count=N` line stands for N consecutive entries).
//! Fault model: parsers return `package_invalid` naming the line or record; they
//! bound every count they read by the input size before allocating.
//! Invariant: parse(write(s)) == s for every stream the packer writes.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "config/result.hpp"
#include "model/package/preset.hpp"

namespace calserve::model::package {

enum class cmd_op : std::uint16_t { csr_write = 1, launch = 2, sync = 3, d2d = 4, d2d_run = 5, done = 6 };
std::string_view to_string(cmd_op op);

struct command {
    cmd_op op = cmd_op::done;
    std::uint64_t count = 1;       // descriptors (d2d_run), else 1
    std::uint64_t src = 0;         // d2d: source address; csr_write: offset; launch: ccu index
    std::uint64_t dst = 0;         // d2d: destination address; sync: sync address
    std::uint64_t data_size = 0;   // bytes per descriptor
    std::uint32_t tar_chip = 0;    // d2d: destination chip
    bool operator==(const command&) const = default;
};

struct command_stream {
    std::string submodel;
    std::uint32_t chip = 0;
    std::string engine;            // "cpu" | "pld_cpu"
    std::string slot;              // "ping" | "pong"
    std::vector<command> cmds;
    bool operator==(const command_stream&) const = default;
};

// The stream of submodel `m`. A decode profile of batch B writes B rows of each CSR
// (base + 4*b) and moves B rows of hidden state per cross-chip sync.
command_stream build_commands(const preset_spec& s, const package& p, const submodel& m, std::uint32_t chip,
                              std::string_view engine, std::string_view slot);

std::string write_commands_text(const command_stream& s);
result<command_stream> parse_commands_text(std::string_view text);
std::string write_commands_binary(const command_stream& s);
result<command_stream> parse_commands_binary(std::string_view bytes);

struct d2d_stats {
    std::uint64_t entries = 0;
    std::uint64_t bytes = 0;
    std::map<std::uint64_t, std::uint64_t> by_size;  // dataSize -> entries
};
d2d_stats d2d_histogram(const command_stream& s);

// Minimal ELF64 images: CCU programs (RISC-V executables) and the prefill D2D helper
// (shared objects exporting `Process`).
inline constexpr std::uint16_t k_em_x86_64 = 62;
inline constexpr std::uint16_t k_em_riscv = 243;
inline constexpr std::uint16_t k_et_exec = 2;
inline constexpr std::uint16_t k_et_dyn = 3;
std::string make_elf(std::uint16_t machine, std::uint16_t type, std::uint64_t seed, std::size_t payload_bytes,
                     const std::vector<std::string>& exports);
struct elf_info {
    std::uint16_t machine = 0;
    std::uint16_t type = 0;
    std::vector<std::string> exports;
};
result<elf_info> parse_elf(std::string_view bytes);

}  // namespace calserve::model::package
