#pragma once
//! calbin package model: the typed view of a package directory that the device
//! simulator, the server and the tools share.
//!
//! Role: `load_package(dir)` reads the versioned calserve manifest
//! (`calserve-manifest.json`, schema 1) of a package in document 000's calbin layout
//! and returns one `package` value: exact submodel names, I/O tensors with ping and
//! pong addresses, CSR offsets, context/batch/vocab, KV layout, chip topology and
//! per-chip parameter files. Deep per-file and cross-file checks live in the
//! validator (`validate.hpp`); the loader only refuses what would make the struct
//! lie (unknown schema, missing fields, wrong types, sizes that do not add up).
//!
//! Fault model: every defect in the input is a `result` error with
//! `status::package_invalid` (or `io_error` when the directory cannot be read);
//! nothing throws past `load_package`.
//!
//! Invariants of a loaded package:
//!   - submodel names are unique, non-empty and none is a substring of another;
//!   - every tensor has byte_size == product(shape) * dtype_bytes(dtype) and
//!     ping_addr != pong_addr (one exclusive buffer per in-flight job);
//!   - chips.size() == topology.chips and each chip has exactly one parameter file
//!     whose size == dram_bytes + sram_bytes;
//!   - kv.bytes_per_chip * topology.tensor_parallel == kv.bytes_total.
#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/result.hpp"

namespace calserve::model::package {

inline constexpr int k_manifest_schema = 1;
inline constexpr std::string_view k_manifest_file = "calserve-manifest.json";

enum class dtype : std::uint8_t { int32, uint32, int8, uint8, bf16, fp16, fp32 };
std::string_view to_string(dtype t);
std::optional<dtype> parse_dtype(std::string_view s);  // "INT32", "BF16", ... (case-insensitive)
std::uint64_t dtype_bytes(dtype t);

// Placements a manifest may name (`placement`); absent means tp.
inline constexpr std::string_view k_placement_tp = "tp";
inline constexpr std::array<std::string_view, 3> k_placements = {"tp", "ep", "pp"};
bool known_placement(std::string_view p);
// Whether a model of `layers` layers and `experts` routed experts (0: dense) can be laid over
// `chips` chips that way: a known value; ep and pp need two chips or more; ep an MoE model
// whose experts divide evenly over the chips; pp at least one layer per chip. The error
// names the `placement` field and says what it needs.
void_result check_placement(std::string_view placement, std::uint32_t chips, std::uint32_t layers, std::uint32_t experts);

enum class submodel_role : std::uint8_t { prefill, decode };
std::string_view to_string(submodel_role r);

// Decode batch profiles (a simulated extension of document 000, status C3 in document 002): a
// package may hold decode submodels for several batch sizes B, each with [B,1] token/position
// inputs, [B,1,vocab] logits and one CSR per row. Row b's register sits at base + 4*b. The
// documented registers are 0x40 apart (cur_seq_len 0x1104, past_kv_cur_seq_len 0x1144), so
// each has room for exactly 16 rows; row 16 of cur_seq_len would be past_kv_cur_seq_len[0].
inline constexpr std::uint32_t k_csr_cur_seq_len_offset = 0x1104;
inline constexpr std::uint32_t k_csr_past_kv_offset = 0x1144;
inline constexpr std::uint32_t k_csr_row_stride = 4;
inline constexpr std::uint32_t k_max_decode_batch = 16;
static_assert((k_csr_past_kv_offset - k_csr_cur_seq_len_offset) / k_csr_row_stride == k_max_decode_batch);
// The prefill stays the documented batch-1 whole-graph program.
inline constexpr std::uint32_t k_prefill_batch = 1;

// One device-visible tensor of a submodel (an input or output port).
struct tensor_spec {
    std::string name;                // semantic name: "token", "position", "logits"
    std::string port;                // runtime port: "inputs[0]", "outputs[0]"
    std::vector<std::int64_t> shape; // e.g. {1, 40960}
    dtype type = dtype::int32;
    std::uint64_t byte_size = 0;     // product(shape) * dtype_bytes(type)
    std::uint64_t ping_addr = 0;     // device address of the ping buffer
    std::uint64_t pong_addr = 0;     // device address of the pong buffer
    std::uint32_t chip = 0;          // chip whose address plan holds the buffers

    std::uint64_t element_count() const;
};

// A control/status register written before each infer.
struct csr_spec {
    std::string name;                // "cur_seq_len", "past_kv_cur_seq_len"
    std::uint32_t offset = 0;        // 0x1104, 0x1144
    dtype type = dtype::uint32;
};

struct submodel {
    std::string name;                // exact name (manifest and submodel metadata agree)
    std::string dir;                 // subdirectory relative to the package root; also the profile key
                                     // of per-submodel files ("prefill", "decode", "decode_b4")
    submodel_role role = submodel_role::decode;
    std::string type_label;          // smodel_type as written by the compiler (may be defective)
    std::uint32_t batch = 1;
    std::uint32_t max_tokens = 1;    // tokens per infer: context for prefill, 1 for decode
    bool dynamic_d2d = false;        // prefill: runtime D2D helper (libcpu_*.so) present
    std::uint64_t workspace_bytes_per_chip = 0;  // peak activation/workspace excluding KV and I/O
    std::uint64_t command_bytes_per_chip = 0;    // resident command binaries + CCU ELF per chip
    std::vector<tensor_spec> inputs;
    std::vector<tensor_spec> outputs;
    std::vector<csr_spec> csrs;

    const tensor_spec* input(std::string_view semantic_name) const;
    const tensor_spec* output(std::string_view semantic_name) const;
    const csr_spec* csr(std::string_view csr_name) const;
};

struct kv_layout {
    std::uint32_t layers = 0;
    std::uint32_t kv_heads = 0;      // total across chips
    std::uint32_t head_dim = 0;
    dtype k_dtype = dtype::bf16;
    dtype v_dtype = dtype::bf16;     // bf16, or int8: an S8 V-cache with per-block scales
    // S8 V only: the dtype of the scale of each block, one block being the head_dim values of
    // one (layer, KV head, position) (the CPU reference model's granularity, docs/decisions.md).
    dtype v_scale_dtype = dtype::fp32;
    std::uint32_t context = 0;       // tokens per sequence slot
    std::uint32_t batch = 1;         // sequence slots of full context the KV region holds
    std::uint64_t bytes_total = 0;   // bytes_per_token_total() * context * batch
    std::uint64_t bytes_per_chip = 0;

    // Scale bytes per (layer, KV head, position): 0 unless V is S8.
    std::uint64_t v_scale_bytes() const;
    // KV bytes of one token over all chips: layers * kv_heads * (head_dim * (K + V bytes) + V scale bytes).
    std::uint64_t bytes_per_token_total() const;
};

struct param_segment {
    enum class memory : std::uint8_t { dram, sram };
    memory kind = memory::dram;
    std::uint64_t file_offset = 0;
    std::uint64_t size = 0;
    std::uint64_t device_addr = 0;
};

// One parameter block file (param_blkN.bin) and where its bytes go on its chip.
struct param_file {
    std::string file;                // relative path, "param_blk0.bin"
    std::uint32_t chip_mask = 0;     // 0x1 chip0, 0x2 chip1
    std::uint64_t size_bytes = 0;
    std::uint64_t dram_bytes = 0;
    std::uint64_t sram_bytes = 0;
    std::vector<param_segment> segments;  // from model_memory_reserved_info.txt, by file offset
};

struct chip_info {
    std::uint32_t index = 0;
    std::uint32_t calcores = 0;
    std::string param_file;          // relative path of this chip's parameter block
    std::uint64_t param_bytes = 0;   // == dram + sram
    std::uint64_t param_dram_bytes = 0;
    std::uint64_t param_sram_bytes = 0;
};

struct topology {
    std::uint32_t chips = 1;
    std::uint32_t calcores_per_chip = 2;
    std::uint32_t tensor_parallel = 1;
};

// Logical address plan applied to each chip (model_memory_reserved_info.txt).
struct reservation {
    std::uint64_t dram_base = 0, dram_bytes = 0;
    std::uint64_t sram_base = 0, sram_bytes = 0;
    std::uint64_t sync_base = 0, sync_bytes = 0;
};

struct layout_info {
    std::string activation_layout;   // e.g. "D0_tiled"
    std::uint32_t tile_d0 = 16;      // token tile read from metadata, never hard-coded
};

struct hash_entry {
    std::string file;                // relative path
    std::uint64_t size = 0;
    std::string sha256;              // full hash, or "" when only the sparse digest is recorded
    std::string sparse_digest;       // sha256(head 1 MiB || tail 1 MiB || size) for big blocks
};

struct package {
    std::filesystem::path root;
    int schema = k_manifest_schema;
    std::string model_name;          // "Qwen3-30B-A3B"
    std::string architecture;        // "qwen3_moe", "qwen3"
    std::string preset;              // pack preset that wrote it, "" for foreign packages
    std::uint32_t context = 0;       // calbin context capacity (tokens)
    std::uint32_t batch = 1;         // largest decode batch profile
    // Sampling head (a C3 extension, docs/device.md "Sampling head"): every decode program
    // ends in a head that samples each row on the device, or returns its top-k logits
    // (k = this) with their ids and the row's log-sum-exp. 0 = no head (logits only).
    std::uint32_t sampling_head_k = 0;
    // How the model is laid over the chips (docs/package-format.md "Placement"): "tp" (every
    // layer split, document 000's layout; the manifest omits it), "ep" (experts partitioned)
    // or "pp" (layers split into stages). Kept as written: the validator names an unknown value.
    std::string placement = std::string(k_placement_tp);
    std::uint32_t vocab = 0;
    topology topo;
    kv_layout kv;
    reservation reserved;
    layout_info layout;
    std::vector<chip_info> chips;
    std::vector<param_file> params;
    std::vector<submodel> submodels;
    std::string runtime_name = "CalRT";
    std::string runtime_version;     // "0.7.6"
    std::vector<hash_entry> hashes;
    std::filesystem::path reference_model_dir;  // absolute; empty when the package has none

    const submodel* find_submodel(std::string_view exact_name) const;
    const submodel* find_role(submodel_role r) const;  // the first of that role (decode: batch 1)
    std::vector<const submodel*> decode_profiles() const;  // decode submodels, by ascending batch
    std::uint64_t total_param_bytes() const;
};

// Reads `<dir>/calserve-manifest.json` and returns the typed package.
result<package> load_package(const std::filesystem::path& dir);

}  // namespace calserve::model::package
