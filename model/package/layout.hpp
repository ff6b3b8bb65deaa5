#pragma once
//! The calbin file layout of document 000, derived from a package's topology.
//!
//! Role: one list of every file a package must contain (path, kind, chip, engine,
//! slot, submodel), used by the packer to write them and by the validator (gate A)
//! to take inventory. Two chips and prefill+decode give document 000's 67 files;
//! each further decode batch profile adds its own directory, op map and profparts.
//! Invariant: paths are relative, unique and use '/' separators.
#include <cstdint>
#include <string>
#include <vector>

#include "model/package/package.hpp"

namespace calserve::model::package {

enum class file_kind : std::uint8_t {
    param_block, model_reservation, hparam, model_yaml, op_map, profparts, version_py, tokenizer,
    submodel_reservation, compile_config, cmd_binary, cmd_text, ccu_elf, cpu_helper
};
std::string_view to_string(file_kind k);

struct layout_entry {
    std::string path;
    file_kind kind = file_kind::tokenizer;
    const submodel* sub = nullptr;  // owning submodel, if any
    std::uint32_t chip = 0;
    std::string engine;             // cmd files: "cpu" | "pld_cpu"; helpers: "x86" | "riscv"
    std::string slot;               // cmd files: "ping" | "pong"
};

std::string model_yaml_name(const package& p);
// Per-submodel root files are keyed by the submodel's directory: "<M>_decode_op_io_buf_ptr.yaml"
// for the documented decode, "<M>_decode_b4_op_io_buf_ptr.yaml" for a batch-4 profile.
std::string op_map_name(const package& p, const submodel& m);
std::string profparts_name(const package& p, const submodel& m, std::uint32_t chip);
std::vector<std::string> tokenizer_files(const package& p);

// Every file of the package except the manifest and the reference model directory.
std::vector<layout_entry> expected_layout(const package& p);

}  // namespace calserve::model::package
