// Single-defect mutants of a valid tiny package: each must produce its own finding
// code and status `fail`, never a crash or an exception.
#include <catch2/catch.hpp>
#include <functional>
#include <set>

#include "model/package/commands.hpp"
#include "model/package/validate.hpp"
#include "tests/model/package_test_support.hpp"

namespace mp = calserve::model::package;
namespace tp = calserve::test::pkg;
namespace fs = std::filesystem;

namespace {

struct mutant {
    const char* name;
    const char* code;
    std::function<void(const fs::path&)> apply;
};

const char* k_yaml = "Tiny-MoE_2_chips_4096_fa.yaml";
const char* k_res = "model_memory_reserved_info.txt";
const char* k_dec = "decode/submodel_memory_reserved_info.txt";
const char* k_pre = "prefill/submodel_memory_reserved_info.txt";

std::vector<mutant> mutants() {
    using tp::edit;
    return {
        {"missing file", "A_MISSING_FILE", [](auto& d) { fs::remove(d / "decode/ccu1_chip1.elf"); }},
        {"truncated parameter block", "A_PARAM_BLOCK_SIZE",
         [](auto& d) {
             const auto size = fs::file_size(d / "param_blk1.bin");
             tp::rewrite(d / "param_blk1.bin", "");
             fs::resize_file(d / "param_blk1.bin", size - 4096);
         }},
        {"hash mismatch", "A_HASH_MISMATCH", [](auto& d) { edit(d, "hparam.yaml", "# golden", "# GOLDEN", false); }},
        {"address past its reservation", "C_ADDRESS_OUT_OF_RESERVATION",
         [](auto& d) { edit(d, "Tiny-MoE_decode_op_io_buf_ptr.yaml", "addr: 0xc00a0000", "addr: 0x7fffc00a0000"); }},
        {"ping/pong alias", "C_PING_PONG_ALIAS", [](auto& d) { edit(d, k_dec, "pong=0xc004d000", "pong=0xc0002000"); }},
        {"ambiguous submodel name", "D_SUBMODEL_NAME_AMBIGUOUS",
         [](auto& d) { edit(d, k_pre, "smodel_name: tiny_moe_prefill_b1_c4096", "smodel_name: tiny_moe"); }},
        {"wrong logits dtype", "D_LOGITS_DTYPE",
         [](auto& d) { edit(d, k_dec, "shape=[1,1,151936] dtype=BF16", "shape=[1,1,151936] dtype=FP16"); }},
        {"vocab disagreement", "D_VOCAB_MISMATCH", [](auto& d) { edit(d, k_yaml, "vocab_size: 151936", "vocab_size: 152064"); }},
        {"chip-mask mismatch", "C_CHIP_MASK_MISMATCH",
         [](auto& d) { edit(d, k_res, "name=param_blk1.bin chip_mask=0x2", "name=param_blk1.bin chip_mask=0x1"); }},
        {"malformed YAML", "B_YAML_SYNTAX", [](auto& d) { edit(d, "hparam.yaml", "decode:\n", "decode: [unclosed\n"); }},
        {"negative size", "B_NEGATIVE_SIZE", [](auto& d) { edit(d, k_dec, "dtype=INT32 size=4 ", "dtype=INT32 size=-4 "); }},
        {"unknown type", "D_UNKNOWN_SUBMODEL_TYPE",
         [](auto& d) { edit(d, k_dec, "smodel_type: llm_decode", "smodel_type: llm_encoder"); }},
        {"context beyond KV capacity", "E_CONTEXT_BEYOND_KV",
         [](auto& d) { edit(d, "calserve-manifest.json", "\"context\": 4096,\n  \"batch\"", "\"context\": 8192,\n  \"batch\""); }},
        {"unknown memory unit", "D_MEMORY_UNIT_UNKNOWN",
         [](auto& d) { edit(d, k_res, "device_memory_required: ", "device_memory_required: 12 parsecs #"); }},
        {"segments do not close", "C_PARAM_SEGMENTS_NOT_CLOSED",
         [](auto& d) { edit(d, k_res, "param_segment: name=seg1 chip_mask=0x2", "# removed: name=seg1 chip_mask=0x2"); }},
        {"parameter offset past the file", "C_PARAM_OFFSET_OUT_OF_FILE",
         [](auto& d) { edit(d, k_res, "chip_mask=0x2 mem=SRAM file_offset=0x983000", "chip_mask=0x2 mem=SRAM file_offset=0x7983000"); }},
        {"golden hashes missing", "F_BLOCKED_REPRODUCIBILITY", [](auto& d) { edit(d, k_yaml, "\ngolden:", "\nno_golden:"); }},
        {"command text and binary disagree", "C_CMD_TEXT_BINARY_MISMATCH",
         [](auto& d) { edit(d, "prefill/pld_cpu_chip0_runtime_cmds_ping.txt", "count=16 ", "count=17 "); }},
        {"profparts disagree with the op map", "C_OP_MAP_PROFPARTS_MISMATCH",
         [](auto& d) { edit(d, "Tiny-MoE_prefill_chip0.profparts", "1\tcast\ttoken_cast", "1\tcast\tposition_cast_x"); }},
        {"D2D helper without Process", "B_ELF_INVALID",
         [](auto& d) {
             tp::rewrite(d / "prefill/libcpu_x86.so", mp::make_elf(mp::k_em_x86_64, mp::k_et_dyn, 3, 8192, {"Main"}));
             tp::rehash(d, "prefill/libcpu_x86.so");
         }},
        {"runtime incompatible", "D_RUNTIME_INCOMPATIBLE",
         [](auto& d) { edit(d, "version.py", "CALRT_MIN_VERSION = \"0.7.6\"", "CALRT_MIN_VERSION = \"0.9.0\""); }},
        {"I/O shape differs from the manifest", "C_IO_MISMATCH",
         [](auto& d) { edit(d, k_pre, "shape=[1,4096] dtype=INT32 size=16384 ping=0xc0000000", "shape=[1,2048] dtype=INT32 size=8192 ping=0xc0000000"); }},
        {"tile missing", "D_LAYOUT_TILE", [](auto& d) { edit(d, k_yaml, "tile_d0: 16", "tile_d0: 0"); }},
        {"dynamic D2D flag contradicts helpers", "D_DYNAMIC_D2D_MISMATCH",
         [](auto& d) { edit(d, "prefill/compile_config.yaml", "dynamic_d2d: true", "dynamic_d2d: false"); }},
        {"hparam beyond the context", "D_HPARAM_OUT_OF_RANGE",
         [](auto& d) { edit(d, "hparam.yaml", "past_kv_cur_seq_len: 4096", "past_kv_cur_seq_len: 9999"); }},
        {"unlisted file", "A_UNLISTED_FILE",
         [](auto& d) { edit(d, "calserve-manifest.json", "\"file\": \"version.py\"", "\"file\": \"version.pyc\""); }},
        {"manifest not JSON", "A_MANIFEST_INVALID", [](auto& d) { tp::rewrite(d / "calserve-manifest.json", "{\"schema\": 1,"); }},
        {"malformed op map", "B_OP_MAP_GRAMMAR",
         [](auto& d) { edit(d, "Tiny-MoE_decode_op_io_buf_ptr.yaml", "size: 4, shape: [1, 1]", "size: 5, shape: [1, 1]"); }},
    };
}

void run_mutants(char gate_from, char gate_to) {
    const auto base = tp::pack_preset("tiny-moe-2chip", "pkg-mutant-base");
    auto clean = mp::validate_package(base, {});
    REQUIRE(clean.ok());
    REQUIRE(clean->status == "pass");
    for (const auto& m : mutants()) {
        if (m.code[0] < gate_from || m.code[0] > gate_to) continue;
        const auto dir = tp::clone(base, "pkg-mutant");
        m.apply(dir);
        auto r = mp::validate_package(dir, {});
        INFO("mutant: " << m.name);
        REQUIRE(r.ok());
        INFO(r->to_json());
        CHECK(r->status == "fail");
        CHECK(r->has(m.code));
        tp::remove_scratch(dir);
    }
    tp::remove_scratch(base);
}

}  // namespace

TEST_CASE("mutants: at least 15, each with its own finding code") {
    std::set<std::string> codes;
    for (const auto& m : mutants()) codes.insert(m.code);
    CHECK(mutants().size() >= 15);
    CHECK(codes.size() == mutants().size());
}

TEST_CASE("mutants: inventory and grammar defects (gates A, B) fail") { run_mutants('A', 'B'); }
TEST_CASE("mutants: cross-file defects (gate C) fail") { run_mutants('C', 'C'); }
TEST_CASE("mutants: semantic, capacity and reproducibility defects (gates D-F) fail") { run_mutants('D', 'F'); }

TEST_CASE("validator: missing directory or manifest is unusable input, not a finding") {
    CHECK(mp::validate_package("/nonexistent/pkg", {}).code() == calserve::status::not_found);
    auto empty = calserve::test::scratch_dir("pkg-empty");
    CHECK(mp::validate_package(empty, {}).code() == calserve::status::not_found);
}

TEST_CASE("gate E: a device too small for the package fails capacity, per chip") {
    const auto dir = tp::pack_preset("tiny-moe-2chip", "pkg-small-device");
    mp::validate_options o;
    o.limits.dram_bytes_per_chip = 128ull << 20;  // above the reservation, below it + 256 MiB guard
    auto r = mp::validate_package(dir, o);
    REQUIRE(r.ok());
    CHECK(r->status == "fail");
    CHECK(r->has("E_CAPACITY_EXCEEDED"));
    CHECK_FALSE(r->has("E_RESERVATION_EXCEEDS_DEVICE"));
    o.limits.dram_bytes_per_chip = 16ull << 20;  // smaller than the DRAM reservation itself
    r = mp::validate_package(dir, o);
    REQUIRE(r.ok());
    CHECK(r->has("E_RESERVATION_EXCEEDS_DEVICE"));
    o.limits.guard_bytes = 0;
    o.limits.dram_bytes_per_chip = 1ull << 30;
    r = mp::validate_package(dir, o);
    REQUIRE(r.ok());
    CHECK(r->status == "pass");
    tp::remove_scratch(dir);
}
