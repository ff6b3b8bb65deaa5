#pragma once
//! Plain value types shared by the device interface and its backends: tensor and
//! submodel descriptions, the package facts a device needs (`package_spec`), job
//! ids and slots. They mirror what CalRT reports for a configured calbin.
//!
//! Invariants (checked by `validate(package_spec)`): every submodel name is unique;
//! every tensor's ping and pong address ranges are disjoint (the basis for two jobs
//! in flight); `bytes` equals the product of the shape times the dtype size.
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "config/result.hpp"

namespace calserve::device {

using job_id = std::uint64_t;
using seq_id = std::uint64_t;

// A session's two buffer sets. At most one job per slot is in flight.
enum class slot : std::uint8_t { ping = 0, pong = 1 };
inline constexpr std::size_t k_slot_count = 2;
constexpr std::string_view to_string(slot s) { return s == slot::ping ? "ping" : "pong"; }
constexpr std::size_t index_of(slot s) { return static_cast<std::size_t>(s); }

enum class dtype : std::uint8_t { int32, uint32, bf16, fp16, fp32, int8, uint8, fp64 };
std::string_view to_string(dtype t);
result<dtype> parse_dtype(std::string_view text);
std::size_t dtype_size(dtype t);

enum class submodel_kind : std::uint8_t { prefill, decode };
constexpr std::string_view to_string(submodel_kind k) { return k == submodel_kind::prefill ? "prefill" : "decode"; }

struct tensor_desc {
    std::string name;                 // semantic name from the manifest: "token", "position", "logits"
    std::vector<std::int64_t> shape;  // e.g. {1, 40960}
    dtype type = dtype::int32;
    std::uint64_t bytes = 0;          // full (unsliced) buffer size
    std::uint64_t ping_address = 0;
    std::uint64_t pong_address = 0;
    std::uint32_t chip = 0;           // chip whose address plan holds the buffers

    std::uint64_t address(slot s) const { return s == slot::ping ? ping_address : pong_address; }
    std::int64_t elements() const;
};

struct csr_desc {
    std::string name;  // "cur_seq_len" or "past_kv_cur_seq_len"
    std::uint32_t offset = 0;
};

inline constexpr std::string_view k_csr_cur_seq_len = "cur_seq_len";
inline constexpr std::string_view k_csr_past_kv_len = "past_kv_cur_seq_len";

struct submodel_desc {
    std::string name;  // exact name; lookups never match substrings
    submodel_kind kind = submodel_kind::decode;
    std::int64_t batch = 1;
    std::int64_t max_tokens = 1;  // token dimension of the inputs (40960 prefill, 1 decode)
    std::vector<tensor_desc> inputs;
    std::vector<tensor_desc> outputs;
    std::vector<csr_desc> csrs;
    std::uint32_t chip_mask = 1;
    std::uint64_t workspace_bytes_per_chip = 0;  // peak activations besides KV and I/O
    std::uint64_t command_bytes_per_chip = 0;    // command binaries and CCU programs
    std::int64_t head_k = 0;                      // ends in a sampling head of top-k head_k (0: none; device/sampling_head.hpp)

    bool has_sampling_head() const { return head_k > 0; }
    const tensor_desc* input(std::string_view name) const;
    const tensor_desc* output(std::string_view name) const;
};

// KV layout: BF16 K and V per layer and KV head, sharded over the chips by head.
struct kv_layout {
    std::int64_t layers = 0;
    std::int64_t kv_heads = 0;
    std::int64_t head_dim = 0;
    std::int64_t context = 0;        // tokens per sequence slot
    std::int64_t slots = 1;          // sequences of full context the KV region holds
    std::int64_t k_bytes = 2;        // bytes per K element (BF16)
    std::int64_t v_bytes = 2;        // bytes per V element (BF16; 1 for an S8 V-cache)
    std::int64_t block_tokens = 256; // allocation granularity
    std::int64_t v_scale_bytes = 0;  // S8 V: scale bytes per (layer, KV head, position); 0 for BF16

    std::int64_t bytes_per_token() const { return layers * kv_heads * (head_dim * (k_bytes + v_bytes) + v_scale_bytes); }
    std::int64_t capacity_tokens() const { return context * slots; }
    std::int64_t total_bytes() const { return bytes_per_token() * capacity_tokens(); }
};

struct chip_memory {
    std::uint64_t parameter_dram_bytes = 0;
    std::uint64_t parameter_sram_bytes = 0;
};

// What a device needs to know about a package. Built from the package manifest
// (`package_spec_from_dir`) or directly by tests.
struct package_spec {
    std::string name;
    std::string architecture;
    std::string runtime_version;    // CalRT version the package was compiled for
    std::string compiler_version;
    std::int64_t vocab_size = 0;
    std::int64_t sampling_head_k = 0;  // decode programs end in a sampling head (top-k size); 0 = none
    std::int64_t context = 0;
    std::int64_t batch = 1;
    std::uint32_t chip_count = 1;
    std::uint32_t calcores_per_chip = 2;
    std::vector<submodel_desc> submodels;
    kv_layout kv;
    std::vector<chip_memory> chips;  // one per used chip, chip i at index i
    std::filesystem::path reference_model_dir;
    // Shape facts for the latency model (from the reference model's config).
    std::int64_t hidden_size = 0;
    std::int64_t num_heads = 0;
    std::int64_t intermediate_size = 0;
    std::int64_t num_experts = 0;
    std::int64_t experts_per_token = 0;
    // The manifest's placement ("tp", "ep" or "pp"; docs/package-format.md "Placement"): how
    // the latency model lays the model over the chips unless device.sim.placement names one.
    std::string placement = "tp";

    const submodel_desc* find(std::string_view exact_name) const;
    const submodel_desc* first_of(submodel_kind kind) const;
    std::uint64_t parameter_bytes(std::uint32_t chip) const;
    std::uint64_t total_parameter_bytes() const;
};

// Structural checks a device runs before accepting a package.
void_result validate(const package_spec& spec);

struct device_info {
    std::string backend;           // "sim"
    std::string runtime_version;   // CalRT version this backend mirrors
    std::string firmware_version;
    std::string driver_version;
    std::uint32_t chip_count = 0;
    std::uint32_t calcores_per_chip = 0;
    std::uint64_t dram_bytes_per_chip = 0;
    std::uint64_t sram_bytes_per_chip = 0;
    // The arithmetic mode its numbers come from ("fp32" or "bf16", model/cpu/kernels.hpp;
    // the simulator and the cpu backend: their reference transformer's). Empty: not said.
    // A golden corpus is checked only against a device of its own mode.
    std::string arithmetic;
};

enum class device_state : std::uint8_t { created, loaded, configured, ready, faulted, lost };
std::string_view to_string(device_state s);

struct memory_usage {
    std::uint32_t chip = 0;
    std::uint64_t dram_used = 0;
    std::uint64_t dram_capacity = 0;
    std::uint64_t sram_used = 0;
    std::uint64_t sram_capacity = 0;
};

struct device_status {
    device_state state = device_state::created;
    std::string last_error;             // empty when healthy
    std::uint64_t jobs_submitted = 0;
    std::uint64_t jobs_completed = 0;
    std::uint32_t jobs_in_flight = 0;
    std::uint64_t resets = 0;
    std::vector<memory_usage> memory;   // one per chip
};

struct kv_usage {
    std::int64_t capacity_tokens = 0;
    std::int64_t block_tokens = 0;
    std::int64_t blocks_total = 0;
    std::int64_t blocks_used = 0;
    std::int64_t sequences = 0;
};

}  // namespace calserve::device
