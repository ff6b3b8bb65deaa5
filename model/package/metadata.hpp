#pragma once
//! The small metadata files of a calbin package: grammar, writers and parsers.
//!
//!   model_memory_reserved_info.txt      reservations, parameter files and segments
//!   <dir>/submodel_memory_reserved_info.txt  type, batch, I/O, CSR, file chip masks
//!   hparam.yaml                          golden/smoke CSR values per submodel
//!   <stem>.yaml                          ONNX, shapes, model/device/compile config, golden hashes
//!   <dir>/compile_config.yaml            per-profile compile options
//!   version.py                           NAME = "value" assignments
//!
//! Role: the packer writes them from a preset; the validator parses them (gate B)
//! and cross-checks the values (gates C-F). Parsers keep raw values (signed sizes,
//! unit strings, type labels) so that the validator, not the parser, decides what is
//! a defect and reports it with its own finding code.
//! Fault model: a syntax error is a `package_invalid` error whose message starts
//! with "syntax:" (YAML) or names the line (text); parsers never throw.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "config/result.hpp"
#include "model/package/preset.hpp"

namespace calserve::model::package {

// ---- model_memory_reserved_info.txt
struct reservation_file {
    std::string model_name;
    std::int64_t chip_nums = 0;
    std::int64_t calcore_nums = 0;
    std::string device_memory_required;  // raw "<number> <unit>"
    reservation reserved;
    struct file_row {
        std::string name;
        std::uint32_t chip_mask = 0;
        std::int64_t size = 0;
    };
    struct segment_row {
        std::string name;
        std::uint32_t chip_mask = 0;
        param_segment::memory kind = param_segment::memory::dram;
        std::int64_t file_offset = 0;
        std::int64_t size = 0;
        std::uint64_t addr = 0;
    };
    std::vector<file_row> param_files;
    std::vector<segment_row> segments;
};
std::string write_model_reservation(const preset_spec& s, const package& p);
result<reservation_file> parse_model_reservation(std::string_view text);

// ---- submodel_memory_reserved_info.txt
struct submodel_file {
    std::string name;
    std::string type;
    std::int64_t batch = 0;
    std::int64_t max_seq_len = 0;
    std::int64_t chip_nums = 0;
    std::string chip_mode;
    struct tensor_row {
        std::string port, name, dtype;
        std::vector<std::int64_t> shape;
        std::int64_t size = 0;
        std::uint64_t ping = 0, pong = 0;
    };
    std::vector<tensor_row> inputs, outputs;
    struct csr_row {
        std::string name;          // "cur_seq_len" (the "[b]" suffix parsed into `row`)
        std::int64_t row = 0;      // batch row b; its register is at base + 4*b
        std::uint32_t offset = 0;
        dtype type = dtype::uint32;
    };
    std::vector<csr_row> csrs;      // one line per CSR and batch row
    std::map<std::string, std::uint32_t> file_masks;  // file name -> chip mask
};
std::string write_submodel_info(const preset_spec& s, const package& p, const submodel& m,
                                const std::vector<std::string>& files);
result<submodel_file> parse_submodel_info(std::string_view text);

// ---- hparam.yaml
struct hparam_file {
    struct csr_values {
        std::int64_t cur = 0, total = 0;
    };
    std::map<std::string, csr_values> by_dir;  // by submodel directory: "prefill", "decode", "decode_b4"
};
std::string write_hparam(const package& p);
result<hparam_file> parse_hparam(std::string_view text);

// ---- <stem>.yaml (model YAML)
struct model_yaml {
    std::string name, type, onnx_path, onnx_sha256, quant;
    std::int64_t vocab = 0, layers = 0, kv_heads = 0, head_dim = 0, max_seq_len = 0, batch = 0;
    std::int64_t chip_nums = 0, calcore_nums = 0, tile_d0 = 0;
    std::string layout;
    std::string calcc_commit, tvm_commit;
    std::map<std::string, bool> compile_flags;
    // Keyed by submodel directory ("prefill", "decode", "decode_b4").
    std::map<std::string, std::map<std::string, std::vector<std::int64_t>>> shapes;  // dir -> tensor -> shape
    std::map<std::string, std::string> golden;  // "<dir>.<input|output>_sha256" -> hex
};
std::string write_model_yaml(const preset_spec& s, const package& p);
result<model_yaml> parse_model_yaml(std::string_view text);

// ---- <dir>/compile_config.yaml
struct compile_config {
    std::string profile;
    std::int64_t batch = 0, max_seq = 0;
    bool is_prefill = false, dynamic_d2d = false;
};
std::string write_compile_config(const package& p, const submodel& m);
result<compile_config> parse_compile_config(std::string_view text);

// ---- version.py
std::string write_version_py(const preset_spec& s, const package& p);
result<std::map<std::string, std::string>> parse_version_py(std::string_view text);

// "16777216 MB" -> bytes; nullopt for an unknown unit or a malformed number.
std::optional<double> memory_amount_bytes(std::string_view text);

}  // namespace calserve::model::package
