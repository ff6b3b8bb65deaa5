#pragma once
//! Pack presets: every figure a synthetic package is written from.
//!
//! Role: `find_preset` returns the preset's model shape, chip topology, parameter
//! block sizes, decode batch profiles and the address-plan knobs; `build_layout`
//! turns it into the typed `package` (addresses, reservations, parameter segments)
//! that the writers emit. The qwen3 replica's knobs are chosen so that the figures
//! *parsed back* from the written files equal document 000 (see
//! docs/package-format.md, "Replica plan"); its only decode profile is batch 1.
//! Fault model: pure data and arithmetic; an unknown preset is std::nullopt.
//! Invariants: param_dram[i] + param_sram == param block size of chip i; the address
//! plan built from a spec never leaves its reservation; the batch-1 addresses do not
//! depend on the other profiles (those live in a region appended to the DRAM
//! reservation), so adding profiles never moves a documented address.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/package/package.hpp"

namespace calserve::model::package {

struct d2d_bucket {
    std::uint64_t size = 0;   // bytes per descriptor (dataSize)
    std::uint64_t count = 0;  // descriptors of that size
};

struct preset_spec {
    std::string name;             // pack preset name
    std::string synthetic_preset; // make_synthetic_model preset ("tiny-dense", "tiny-moe")
    std::string model_name;       // "Qwen3-30B-A3B"
    std::string architecture;     // "qwen3_moe" | "qwen3"
    std::string file_stem;        // "Qwen3-30B-A3B_2_chips_40960_fa"
    std::string submodel_stem;    // "qwen3_30b_a3b"
    std::uint32_t chips = 1, calcores = 2, context = 4096, vocab = 151936;
    std::vector<std::uint32_t> decode_batches{1};  // decode profiles, ascending, first 1
    std::uint32_t sampling_head_k = 0;             // decode programs end in a sampling head (top-k size); 0 = none
    std::uint32_t kv_slots = 1;                    // sequences of full context the KV region holds
    bool kv_for_profiles = false;  // pack sizes kv_slots with the planner for the largest profile
    dtype v_dtype = dtype::bf16;   // KV V dtype: bf16, or int8 (S8 V-cache, FP32 scale per position)
    std::uint32_t layers = 2, hidden = 64, kv_heads = 2, head_dim = 32, heads = 4;
    std::uint32_t experts = 0, experts_per_token = 0, moe_intermediate = 0, intermediate = 128;
    std::vector<std::uint64_t> param_dram;  // per chip
    std::uint64_t param_sram = 0;           // per chip
    std::uint64_t const_unreferenced = 0;   // chip0 parameter bytes no op addresses (padding)
    std::uint64_t dram_reserved = 0;        // 0: plan end of the prefill workspace
    std::uint64_t sram_reserved = 0;        // 0: params + scratch
    std::uint64_t prefill_dram_workspace = 0;  // used when dram_reserved == 0
    std::uint64_t prefill_sram_scratch = 0;
    std::uint64_t decode_sram_scratch = 0;
    std::string device_memory_required;     // written verbatim, e.g. "16777216 MB"
    std::string prefill_type_label = "llm_prefill";
    std::uint32_t tokenizer_max_length = 131072;
    std::vector<std::vector<d2d_bucket>> prefill_d2d;  // per chip
    std::vector<std::uint64_t> d2d_singletons_chip0;   // extra one-off descriptors on chip0
    bool sparse_params = true;
    std::string onnx_path, onnx_sha256, calcc_commit, tvm_commit;

    bool moe() const { return experts > 0; }
};

std::optional<preset_spec> find_preset(std::string_view name);
std::vector<std::string> preset_names();

// Sizes the tiny presets from a model config (layers, heads, vocab) so the package's
// KV layout and parameter blocks match the reference model it carries.
void size_from_model(preset_spec& spec);

// The package (manifest view) of a preset: names, I/O addresses, reservations,
// KV layout, chips and parameter segments. Hashes are filled in by the packer.
package build_layout(const preset_spec& spec);

// Address-plan anchors derived from a layout, shared by the op-map generator.
struct address_plan {
    std::uint64_t kv_base = 0, kv_bytes = 0;
    std::uint64_t param_dram_base = 0;
    std::uint64_t prefill_logits_ping = 0;
    std::uint64_t prefill_ws_base = 0, prefill_ws_bytes = 0;
    std::uint64_t prefill_sram_base = 0, prefill_sram_bytes = 0;
    std::uint64_t decode_sram_base = 0, decode_sram_bytes = 0;  // shared by every decode profile
};
address_plan plan_addresses(const preset_spec& spec, const package& p);

}  // namespace calserve::model::package
