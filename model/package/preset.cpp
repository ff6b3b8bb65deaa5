// Pack presets and the address plan derived from them.
#include "model/package/preset.hpp"

#include <algorithm>

namespace calserve::model::package {

namespace {

constexpr std::uint64_t k_dram_base = 0xc0000000ull;
constexpr std::uint64_t k_sram_base = 0x08000000ull;
constexpr std::uint64_t k_sync_base = 0x0a080000ull;
constexpr std::uint64_t k_sync_bytes = 20;
constexpr std::uint64_t k_page = 0x1000;
constexpr std::uint64_t k_io_align = 0x10000;
constexpr std::uint64_t k_token_slot = 0x400;

std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

preset_spec qwen3_replica() {
    preset_spec s;
    s.name = "qwen3-30b-a3b-2chip";
    s.synthetic_preset = "tiny-moe";
    s.model_name = "Qwen3-30B-A3B";
    s.architecture = "qwen3_moe";
    s.file_stem = "Qwen3-30B-A3B_2_chips_40960_fa";
    s.submodel_stem = "qwen3_30b_a3b";
    s.chips = 2;
    s.context = 40960;
    s.layers = 48;
    s.hidden = 2048;
    s.heads = 32;
    s.kv_heads = 4;
    s.head_dim = 128;
    s.experts = 128;
    s.experts_per_token = 8;
    s.moe_intermediate = 768;
    s.intermediate = 6144;
    s.param_dram = {9389477888ull, 8767148032ull};
    s.param_sram = 15079424ull;
    s.const_unreferenced = 262144;
    s.dram_reserved = 15113064448ull;
    s.sram_reserved = 17662336ull;
    s.prefill_sram_scratch = 2400ull * 1024;
    s.decode_sram_scratch = 128ull * 1024;
    s.device_memory_required = "16777216 MB";
    s.prefill_type_label = "llm_decode";
    const std::vector<d2d_bucket> buckets{{65536, 245760}, {32768, 122880}, {1024, 75968}};
    s.prefill_d2d = {buckets, buckets};
    s.d2d_singletons_chip0 = {160ull << 20, 160ull << 10};
    s.onnx_path =
        "/st_scratch/STG/calq_export_models/llm/Qwen3-30B-A3B/Dynamic/Merge_full_layers/"
        "Qwen3-30B-A3B-dynamic-W8A8-W4AF16-full_layers_merged.onnx";
    s.onnx_sha256 = "316f06e7e316b1305486118fa7da65f816b61deb46de09a2f4fec6979530456c";
    s.calcc_commit = "575c2d708e306a60f10bc34f5087477073b58caa";
    s.tvm_commit = "7aebd1c21fa67d942a1fd93e39e8a67007f91c0c";
    return s;
}

preset_spec tiny_base(std::string name, std::string synthetic, std::uint32_t chips) {
    preset_spec s;
    s.name = std::move(name);
    s.synthetic_preset = std::move(synthetic);
    s.model_name = chips == 1 ? "Tiny-Dense" : "Tiny-MoE";
    s.architecture = chips == 1 ? "qwen3" : "qwen3_moe";
    s.chips = chips;
    s.context = 4096;
    s.file_stem = s.model_name + "_" + std::to_string(chips) + "_chips_4096_fa";
    s.submodel_stem = chips == 1 ? "tiny_dense" : "tiny_moe";
    s.device_memory_required = "";  // sized in size_from_model
    s.decode_sram_scratch = 16 * 1024;
    s.prefill_sram_scratch = 64 * 1024;
    s.decode_batches = {1, 2, 4, 8, 16};
    s.sampling_head_k = 64;
    s.kv_for_profiles = true;
    s.onnx_path = "onnx/" + s.submodel_stem + ".onnx";
    s.calcc_commit = "0000000000000000000000000000000000c0ffee";
    s.tvm_commit = "00000000000000000000000000000000000be5e1";
    return s;
}

}  // namespace

std::vector<std::string> preset_names() { return {"tiny-dense-1chip", "tiny-moe-2chip", "qwen3-30b-a3b-2chip"}; }

std::optional<preset_spec> find_preset(std::string_view name) {
    if (name == "qwen3-30b-a3b-2chip") return qwen3_replica();
    if (name == "tiny-dense-1chip") {
        auto s = tiny_base("tiny-dense-1chip", "tiny-dense", 1);
        size_from_model(s);
        return s;
    }
    if (name == "tiny-moe-2chip") {
        auto s = tiny_base("tiny-moe-2chip", "tiny-moe", 2);
        s.experts = 8;
        s.experts_per_token = 2;
        s.moe_intermediate = 32;
        size_from_model(s);
        return s;
    }
    return std::nullopt;
}

void size_from_model(preset_spec& s) {
    const std::uint64_t h = s.hidden, hd = s.head_dim, bf = 2;
    const std::uint64_t embedding = std::uint64_t{s.vocab} * h * bf;
    const std::uint64_t attn = (h * s.heads * hd * 2 + h * s.kv_heads * hd * 2) * bf;
    const std::uint64_t mlp = s.moe() ? (std::uint64_t{s.experts} * 3 * h * s.moe_intermediate + h * s.experts) * bf
                                      : 3 * h * s.intermediate * bf;
    const std::uint64_t shared = (attn + mlp) * s.layers + embedding;  // layers + lm_head
    s.param_dram.assign(s.chips, 0);
    for (std::uint32_t c = 0; c < s.chips; ++c)
        s.param_dram[c] = align_up(shared / s.chips + (c == 0 ? embedding : 0), k_page);
    s.param_sram = align_up((2 * h + 2 * hd) * s.layers * bf + h * bf, k_page);
    s.prefill_dram_workspace = align_up(std::uint64_t{s.context} * (4 * h + s.intermediate) * bf * 2, k_page);
    const std::uint64_t per_chip_kib = (s.param_dram[0] + s.param_sram) / 1024 * 4;
    s.device_memory_required = std::to_string(per_chip_kib / 1024 + 1) + " MB";
    s.prefill_d2d.clear();
    if (s.chips > 1) {
        const std::vector<d2d_bucket> b{{65536, s.layers * 16ull}, {32768, s.layers * 8ull}, {1024, s.layers * 32ull}};
        s.prefill_d2d.assign(s.chips, b);
        s.d2d_singletons_chip0 = {std::uint64_t{s.context} * 4};
    }
    s.sparse_params = false;
}

namespace {

tensor_spec make_tensor(std::string name, std::string port, std::vector<std::int64_t> shape, dtype t,
                        std::uint64_t ping, std::uint64_t pong) {
    tensor_spec x{std::move(name), std::move(port), std::move(shape), t, 0, ping, pong, 0};
    x.byte_size = x.element_count() * dtype_bytes(t);
    return x;
}

std::vector<csr_spec> default_csrs() {
    return {{"cur_seq_len", k_csr_cur_seq_len_offset, dtype::uint32},
            {"past_kv_cur_seq_len", k_csr_past_kv_offset, dtype::uint32}};
}

submodel make_prefill(const preset_spec& s, std::uint64_t logits_ping) {
    submodel m;
    m.name = s.submodel_stem + "_prefill_b" + std::to_string(k_prefill_batch) + "_c" + std::to_string(s.context);
    m.dir = "prefill";
    m.role = submodel_role::prefill;
    m.type_label = s.prefill_type_label;
    m.batch = k_prefill_batch;
    m.max_tokens = s.context;
    m.dynamic_d2d = s.chips > 1;
    const std::int64_t ctx = s.context;
    const std::uint64_t in_bytes = std::uint64_t{s.context} * 4, slot = align_up(in_bytes, k_page);
    m.inputs.push_back(make_tensor("token", "inputs[0]", {1, ctx}, dtype::int32, k_dram_base, k_dram_base + slot));
    m.inputs.push_back(make_tensor("position", "inputs[1]", {1, ctx}, dtype::int32, k_dram_base + 2 * slot,
                                   k_dram_base + 3 * slot));
    const std::uint64_t logits = std::uint64_t{s.vocab} * 2;
    m.outputs.push_back(make_tensor("logits", "outputs[0]", {1, 1, s.vocab}, dtype::bf16, logits_ping,
                                    align_up(logits_ping + logits, k_page)));
    m.csrs = default_csrs();
    return m;
}

// Name, directory and CSRs of the decode profile of batch B ("decode" for B = 1, as documented).
submodel decode_header(const preset_spec& s, std::uint32_t batch) {
    submodel m;
    m.name = s.submodel_stem + "_decode_b" + std::to_string(batch) + "_c" + std::to_string(s.context);
    m.dir = batch == 1 ? "decode" : "decode_b" + std::to_string(batch);
    m.role = submodel_role::decode;
    m.type_label = "llm_decode";
    m.batch = batch;
    m.max_tokens = 1;
    m.csrs = default_csrs();
    return m;
}

// The documented batch-1 decode: token in SRAM after the parameters, position and logits at the
// start of DRAM (document 000 section 5).
submodel make_decode(const preset_spec& s) {
    submodel m = decode_header(s, 1);
    const std::uint64_t token = k_sram_base + s.param_sram;
    m.inputs.push_back(make_tensor("token", "inputs[0]", {1, 1}, dtype::int32, token, token + k_token_slot));
    m.inputs.push_back(make_tensor("position", "inputs[1]", {1, 1}, dtype::int32, k_dram_base, k_dram_base + k_page));
    const std::uint64_t logits = std::uint64_t{s.vocab} * 2, ping = k_dram_base + 2 * k_page;
    m.outputs.push_back(
        make_tensor("logits", "outputs[0]", {1, 1, s.vocab}, dtype::bf16, ping, align_up(ping + logits, k_page)));
    return m;
}

// A decode profile of batch B > 1: every buffer on its own pages from `cursor` on, so no two
// buffers of any submodel overlap.
submodel make_decode_profile(const preset_spec& s, std::uint32_t batch, std::uint64_t& cursor) {
    submodel m = decode_header(s, batch);
    auto place = [&](std::string name, std::string port, std::vector<std::int64_t> shape, dtype t) {
        tensor_spec x = make_tensor(std::move(name), std::move(port), std::move(shape), t, 0, 0);
        x.ping_addr = cursor;
        x.pong_addr = align_up(x.ping_addr + x.byte_size, k_page);
        cursor = align_up(x.pong_addr + x.byte_size, k_page);
        return x;
    };
    const std::int64_t b = batch;
    m.inputs.push_back(place("token", "inputs[0]", {b, 1}, dtype::int32));
    m.inputs.push_back(place("position", "inputs[1]", {b, 1}, dtype::int32));
    m.outputs.push_back(place("logits", "outputs[0]", {b, 1, s.vocab}, dtype::bf16));
    return m;
}

// Profiles B > 1 get a region appended to the DRAM reservation, after the prefill workspace:
// the batch-1 plan (and so every address of document 000) stays where it is.
void add_decode_profiles(const preset_spec& s, package& p) {
    std::uint64_t cursor = align_up(p.reserved.dram_base + p.reserved.dram_bytes, k_io_align);
    bool any = false;
    for (auto batch : s.decode_batches) {
        if (batch <= 1) continue;
        p.submodels.push_back(make_decode_profile(s, batch, cursor));
        any = true;
    }
    if (any) p.reserved.dram_bytes = align_up(cursor, k_io_align) - p.reserved.dram_base;
}

std::uint64_t io_end(const package& p) {
    std::uint64_t end = k_dram_base;
    for (const auto& m : p.submodels)
        for (const auto* list : {&m.inputs, &m.outputs})
            for (const auto& t : *list)
                if (t.ping_addr >= k_dram_base && t.ping_addr < k_dram_base + 0x10000000ull)
                    end = std::max({end, t.ping_addr + t.byte_size, t.pong_addr + t.byte_size});
    return align_up(end, k_io_align);
}

void add_segments(const preset_spec& s, package& p, std::uint64_t dram_base) {
    for (std::uint32_t c = 0; c < s.chips; ++c) {
        param_file f;
        f.file = "param_blk" + std::to_string(c) + ".bin";
        f.chip_mask = 1u << c;
        f.dram_bytes = s.param_dram[c];
        f.sram_bytes = s.param_sram;
        f.size_bytes = f.dram_bytes + f.sram_bytes;
        std::uint64_t off = 0;
        auto push = [&](param_segment::memory k, std::uint64_t size, std::uint64_t addr) {
            f.segments.push_back({k, off, size, addr});
            off += size;
        };
        const std::uint64_t embedding = c == 0 && s.chips > 1 ? s.param_dram[0] - s.param_dram[1] : 0;
        if (embedding) push(param_segment::memory::dram, embedding, dram_base);
        const std::uint64_t rest = f.dram_bytes - embedding;
        const std::uint64_t layer = rest / (s.layers + 1) / k_page * k_page;
        for (std::uint32_t l = 0; l < s.layers; ++l) push(param_segment::memory::dram, layer, dram_base + off);
        push(param_segment::memory::dram, f.dram_bytes - off, dram_base + off);
        push(param_segment::memory::sram, s.param_sram, k_sram_base);
        p.chips.push_back({c, s.calcores, f.file, f.size_bytes, f.dram_bytes, f.sram_bytes});
        p.params.push_back(std::move(f));
    }
}

}  // namespace

package build_layout(const preset_spec& s) {
    package p;
    p.model_name = s.model_name;
    p.architecture = s.architecture;
    p.preset = s.name;
    p.context = s.context;
    p.batch = s.decode_batches.empty() ? 1 : *std::max_element(s.decode_batches.begin(), s.decode_batches.end());
    p.vocab = s.vocab;
    p.sampling_head_k = s.sampling_head_k;
    p.topo = {s.chips, s.calcores, s.chips};
    p.layout = {"D0_tiled", 16};
    p.runtime_version = "0.7.6";
    p.kv = {s.layers, s.kv_heads, s.head_dim, dtype::bf16, s.v_dtype, dtype::fp32, s.context, s.kv_slots, 0, 0};
    p.kv.bytes_total = p.kv.bytes_per_token_total() * s.context * s.kv_slots;
    p.kv.bytes_per_chip = p.kv.bytes_total / s.chips;
    p.submodels.push_back(make_decode(s));  // decode first: its I/O anchors the DRAM plan
    const std::uint64_t prefill_in_end = k_dram_base + 4 * align_up(std::uint64_t{s.context} * 4, k_page);
    const std::uint64_t kv_base = align_up(std::max(io_end(p), prefill_in_end), k_io_align);
    const std::uint64_t param_base = kv_base + p.kv.bytes_per_chip;
    p.submodels.insert(p.submodels.begin(), make_prefill(s, param_base + s.param_dram[0]));
    const std::uint64_t dram_base = k_dram_base;
    const auto& logits = p.submodels.front().outputs.front();
    const std::uint64_t ws_base = logits.pong_addr + logits.byte_size;
    p.reserved.dram_base = dram_base;
    p.reserved.dram_bytes = s.dram_reserved ? s.dram_reserved : ws_base + s.prefill_dram_workspace - dram_base;
    p.reserved.sram_base = k_sram_base;
    p.reserved.sram_bytes = s.sram_reserved ? s.sram_reserved
                                            : align_up(s.param_sram + std::max(2 * k_token_slot + s.decode_sram_scratch,
                                                                               s.prefill_sram_scratch), k_page);
    p.reserved.sync_base = k_sync_base;
    p.reserved.sync_bytes = k_sync_bytes;
    p.submodels.front().workspace_bytes_per_chip = dram_base + p.reserved.dram_bytes - ws_base;
    add_segments(s, p, param_base);
    add_decode_profiles(s, p);
    return p;
}

address_plan plan_addresses(const preset_spec& s, const package& p) {
    address_plan a;
    const auto& pre = p.submodels.front();
    a.kv_bytes = p.kv.bytes_per_chip;
    a.param_dram_base = p.params.front().segments.front().device_addr;
    a.kv_base = a.param_dram_base - a.kv_bytes;
    a.prefill_logits_ping = pre.outputs.front().ping_addr;
    a.prefill_ws_base = pre.outputs.front().pong_addr + pre.outputs.front().byte_size;
    a.prefill_ws_bytes = pre.workspace_bytes_per_chip;
    a.prefill_sram_base = p.reserved.sram_base + s.param_sram;
    a.prefill_sram_bytes = s.prefill_sram_scratch;
    a.decode_sram_base = a.prefill_sram_base + 2 * k_token_slot;
    a.decode_sram_bytes = s.decode_sram_scratch;
    return a;
}

}  // namespace calserve::model::package
