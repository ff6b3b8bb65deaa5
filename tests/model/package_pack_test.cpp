// calserve pack + load_package: the typed struct, the layout and the parsers' round trips.
#include <catch2/catch.hpp>
#include <cstring>

#include "model/package/commands.hpp"
#include "model/package/gguf.hpp"
#include "model/package/layout.hpp"
#include "model/package/manifest.hpp"
#include "model/package/op_map.hpp"
#include "model/package/package.hpp"
#include "model/package/validate.hpp"
#include "tests/model/package_test_support.hpp"

namespace mp = calserve::model::package;
namespace tp = calserve::test::pkg;
namespace fs = std::filesystem;

TEST_CASE("pack tiny-moe-2chip: 67 files plus 25 per extra decode profile, typed package, validates clean") {
    const auto dir = tp::pack_preset("tiny-moe-2chip", "pkg-tiny-moe");
    auto p = mp::load_package(dir);
    REQUIRE(p.ok());
    CHECK(p->topo.chips == 2);
    CHECK(p->topo.tensor_parallel == 2);
    CHECK(p->vocab == 151936);
    CHECK(p->context == 4096);
    CHECK(p->hashes.size() == 67 + 4 * 25);  // profiles 2, 4, 8, 16 beside the documented pair
    CHECK(mp::expected_layout(*p).size() == 67 + 4 * 25);
    REQUIRE(p->submodels.size() == 6);
    const auto* pre = p->find_role(mp::submodel_role::prefill);
    const auto* dec = p->find_role(mp::submodel_role::decode);
    REQUIRE(pre);
    REQUIRE(dec);
    CHECK(p->find_submodel(pre->name) == pre);
    CHECK(p->find_submodel("tiny_moe") == nullptr);  // exact names only
    CHECK(pre->input("token")->shape == std::vector<std::int64_t>{1, 4096});
    CHECK(pre->input("token")->type == mp::dtype::int32);
    CHECK(dec->input("token")->shape == std::vector<std::int64_t>{1, 1});
    const auto* logits = dec->output("logits");
    CHECK(logits->byte_size == 303872);
    CHECK(logits->type == mp::dtype::bf16);
    CHECK(logits->ping_addr != logits->pong_addr);
    CHECK(dec->csr("cur_seq_len")->offset == 0x1104);
    CHECK(dec->csr("past_kv_cur_seq_len")->offset == 0x1144);
    CHECK(p->kv.layers == 2);
    CHECK(p->kv.bytes_per_chip * 2 == p->kv.bytes_total);
    CHECK(p->kv.bytes_total == p->kv.bytes_per_token_total() * 4096 * 16);  // 16 sequences of 4096
    CHECK(fs::exists(p->reference_model_dir / "config.json"));
    CHECK(p->chips[0].param_bytes == fs::file_size(dir / "param_blk0.bin"));
    for (const auto& f : p->params) {  // segments tile each block, SRAM last
        REQUIRE_FALSE(f.segments.empty());
        std::uint64_t next = 0;
        for (const auto& s : f.segments) {
            CHECK(s.file_offset == next);
            next += s.size;
        }
        CHECK(next == f.size_bytes);
        CHECK(f.segments.back().kind == mp::param_segment::memory::sram);
    }

    auto r = mp::validate_package(dir, {});
    REQUIRE(r.ok());
    INFO(r->to_json());
    CHECK(r->status == "pass");
    CHECK(r->count(mp::severity::warning) == 0);
    CHECK(r->has("D_CONTEXT_RESOLVED"));  // tokenizer 131072 vs calbin 4096, as info
    CHECK(r->figures.context_usable == 4096);
    tp::remove_scratch(dir);
}

TEST_CASE("pack tiny-dense-1chip: single chip, no D2D helpers, deterministic metadata") {
    const auto a = tp::pack_preset("tiny-dense-1chip", "pkg-tiny-dense-a");
    const auto b = tp::pack_preset("tiny-dense-1chip", "pkg-tiny-dense-b");
    auto p = mp::load_package(a);
    REQUIRE(p.ok());
    CHECK(p->topo.chips == 1);
    CHECK(p->chips.size() == 1);
    CHECK_FALSE(p->find_role(mp::submodel_role::prefill)->dynamic_d2d);
    CHECK_FALSE(fs::exists(a / "prefill/libcpu_x86.so"));
    for (const auto* rel : {"model_memory_reserved_info.txt", "Tiny-Dense_prefill_op_io_buf_ptr.yaml",
                            "prefill/pld_cpu_chip0_ping.bin", "decode/ccu0_chip0.elf", "param_blk0.bin"})
        CHECK(mp::sha256_file(a / rel).value() == mp::sha256_file(b / rel).value());
    auto r = mp::validate_package(a, {});
    REQUIRE(r.ok());
    CHECK(r->status == "pass");
    tp::remove_scratch(a);
    tp::remove_scratch(b);
}

TEST_CASE("manifest, op map, command and binary forms round-trip") {
    auto spec = mp::find_preset("tiny-moe-2chip");
    REQUIRE(spec);
    auto p = mp::build_layout(*spec);
    p.root = "/pkg";
    auto back = mp::parse_manifest(mp::write_manifest_json(p), "/pkg");
    REQUIRE(back.ok());
    CHECK(back->submodels[0].inputs[1].pong_addr == p.submodels[0].inputs[1].pong_addr);
    CHECK(back->params[1].chip_mask == 2);

    auto ops = mp::build_op_map(*spec, p, *p.find_role(mp::submodel_role::decode));
    auto ops_back = mp::parse_op_map_yaml(mp::write_op_map_yaml(ops));
    REQUIRE(ops_back.ok());
    CHECK(ops_back->ops.size() == ops.ops.size());
    CHECK(ops_back->ops.back().outputs[0].addr == ops.ops.back().outputs[0].addr);

    auto cmds = mp::build_commands(*spec, p, *p.find_role(mp::submodel_role::prefill), 0, "pld_cpu", "ping");
    auto text = mp::parse_commands_text(mp::write_commands_text(cmds));
    auto bin = mp::parse_commands_binary(mp::write_commands_binary(cmds));
    REQUIRE(text.ok());
    REQUIRE(bin.ok());
    CHECK(text->cmds == cmds.cmds);
    CHECK(bin->cmds == cmds.cmds);
    CHECK(mp::d2d_histogram(*text).entries == spec->layers * 56ull + 1);

    auto elf = mp::parse_elf(mp::make_elf(mp::k_em_x86_64, mp::k_et_dyn, 1, 100, {"Process"}));
    REQUIRE(elf.ok());
    CHECK(elf->exports == std::vector<std::string>{"Process"});
    // Fuzzer regression: a section of type 0 with an offset past the file.
    auto bad = mp::make_elf(mp::k_em_riscv, mp::k_et_exec, 1, 64, {});
    const std::uint64_t shoff = *reinterpret_cast<const std::uint64_t*>(bad.data() + 40);
    const std::uint64_t far = 3ull << 32;
    std::memset(bad.data() + shoff + 3 * 64 + 4, 0, 4);           // sh_type = 0
    std::memcpy(bad.data() + shoff + 3 * 64 + 24, &far, sizeof far);  // sh_offset
    CHECK_FALSE(mp::parse_elf(bad).ok());
    auto tokens = mp::vocab_gguf_token_count(mp::write_vocab_gguf("qwen3", "x", {"a", "b", "c"}));
    REQUIRE(tokens.ok());
    CHECK(*tokens == 3);
    auto truncated = mp::vocab_gguf_token_count(std::string_view("GGUF\x03\0\0\0", 8));
    REQUIRE_FALSE(truncated.ok());
    CHECK(truncated.code() == calserve::status::package_invalid);
}

TEST_CASE("load_package refuses a missing directory and a broken manifest") {
    CHECK(mp::load_package("/nonexistent/pkg").code() == calserve::status::not_found);
    auto dir = calserve::test::scratch_dir("pkg-broken");
    tp::rewrite(dir / "calserve-manifest.json", "{\"schema\": 1");
    CHECK(mp::load_package(dir).code() == calserve::status::package_invalid);
    tp::rewrite(dir / "calserve-manifest.json", "{\"schema\": 2}");
    CHECK(mp::load_package(dir).code() == calserve::status::package_invalid);
}
