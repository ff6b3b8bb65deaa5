// The qwen3-30b-a3b-2chip replica: every figure of document 000, parsed back from the files.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>

#include "model/package/capacity.hpp"
#include "model/package/validate.hpp"
#include "tests/model/package_test_support.hpp"

namespace mp = calserve::model::package;
namespace tp = calserve::test::pkg;
namespace fs = std::filesystem;

namespace {
constexpr double k_gib = 1024.0 * 1024.0 * 1024.0;
// Document 000 prints GiB with three decimals.
double gib3(std::uint64_t bytes) { return std::round(static_cast<double>(bytes) / k_gib * 1000.0) / 1000.0; }
}  // namespace

TEST_CASE("qwen3 replica: pass_with_warnings with exactly the two documented defects and document 000's figures") {
    const auto dir = tp::pack_preset("qwen3-30b-a3b-2chip", "pkg-replica");
    CHECK(fs::file_size(dir / "param_blk0.bin") == 9404557312ull);
    CHECK(fs::file_size(dir / "param_blk1.bin") == 8782227456ull);
    auto p = mp::load_package(dir);  // packed without --decode-batches: the documented batch-1 decode only
    REQUIRE(p.ok());
    REQUIRE(p->decode_profiles().size() == 1);
    CHECK(p->decode_profiles().front()->name == "qwen3_30b_a3b_decode_b1_c40960");
    CHECK(p->batch == 1);
    CHECK(p->kv.batch == 1);
    CHECK(p->reserved.dram_bytes == 15113064448ull);
    auto r = mp::validate_package(dir, {});
    REQUIRE(r.ok());
    INFO(r->to_json());
    CHECK(r->status == "pass_with_warnings");
    CHECK(r->count(mp::severity::error) == 0);
    REQUIRE(r->count(mp::severity::warning) == 2);
    CHECK(r->has("D_TYPE_LABEL_MISMATCH"));  // prefill labelled llm_decode
    CHECK(r->has("D_IMPOSSIBLE_UNIT"));      // device_memory_required: 16777216 MB
    CHECK(r->has("D_CONTEXT_RESOLVED"));     // tokenizer 131072 vs calbin 40960 (info)
    const auto& f = r->figures;
    CHECK(f.file_count == 67);
    CHECK(f.context_usable == 40960);

    CHECK(f.param_bytes_total == 18186784768ull);
    REQUIRE(f.params.size() == 2);
    CHECK(f.params[0].dram_bytes == 9389477888ull);
    CHECK(f.params[1].dram_bytes == 8767148032ull);
    CHECK(f.params[0].sram_bytes == 15079424ull);
    CHECK(f.params[1].sram_bytes == 15079424ull);
    CHECK(f.params[0].closes);
    CHECK(f.params[1].closes);

    CHECK(f.kv_bytes_total == 4026531840ull);
    CHECK(f.kv_bytes_per_chip == 2013265920ull);
    const auto& dec = f.unions.at("decode");
    const auto& pre = f.unions.at("prefill");
    CHECK(dec.largest_activation_interval == 2013265920ull);
    CHECK(dec.largest_activation_start == 0xc00a0000ull);
    CHECK(gib3(dec.constant) == Approx(8.758));
    CHECK(gib3(dec.activation) == Approx(1.875));
    CHECK(dec.input == 8);
    CHECK(gib3(dec.total) == Approx(10.634));
    CHECK(gib3(pre.constant) == Approx(8.758));
    CHECK(gib3(pre.activation) == Approx(5.332));
    CHECK(pre.input == 327680);  // 0.000305 GiB
    CHECK(gib3(pre.total) == Approx(14.091));

    REQUIRE(f.prefill_d2d.size() == 2);
    CHECK(f.prefill_d2d[0].entries == 444610);
    CHECK(f.prefill_d2d[1].entries == 444608);
    CHECK(gib3(f.prefill_d2d[0].bytes) == Approx(18.979));
    CHECK(gib3(f.prefill_d2d[1].bytes) == Approx(18.822));
    for (const auto& d : f.prefill_d2d) {
        CHECK(d.by_size.at(65536) == 245760);
        CHECK(d.by_size.at(32768) == 122880);
        CHECK(d.by_size.at(1024) == 75968);
    }
    CHECK(f.prefill_d2d[0].by_size.at(160ull << 20) == 1);
    CHECK(f.prefill_d2d[0].by_size.at(160ull << 10) == 1);

    CHECK(f.profparts_lines.at("decode") == std::vector<std::uint64_t>{1254, 1253});
    CHECK(f.profparts_lines.at("prefill") == std::vector<std::uint64_t>{1352, 1351});
    for (const auto* role : {"decode", "prefill"})
        for (std::size_t chip = 0; chip < 2; ++chip) {
            const auto& fam = f.op_families.at(role)[chip];
            CHECK(fam.at("rmsnorm") == 193);
            CHECK(fam.at("qmatmul") == 193);
            CHECK(fam.at("moe_grouped_dense") == 144);
            for (const auto* k : {"kv_scatter", "rope", "residual_add"}) CHECK(fam.at(k) == 96);
            for (const auto* k : {"flash_attention", "router_pre", "router_post", "silu", "multiply", "reduce"})
                CHECK(fam.at(k) == 48);
            CHECK(fam.count("embedding") == (chip == 0 ? 1u : 0u));
        }
    tp::remove_scratch(dir);
}

TEST_CASE("qwen3 replica capacity (document 000 section 13): batch 1 at 40960 fits, batch 4 does not") {
    const auto dir = tp::pack_preset("qwen3-30b-a3b-2chip", "pkg-replica-plan");
    auto p = mp::load_package(dir);
    REQUIRE(p.ok());
    const mp::capacity_limits limits;  // 16 GiB per chip (32 GiB board), 256 MiB guard
    auto b1 = mp::plan_capacity(*p, 1, 40960, mp::kv_dtype_choice::bf16, limits);
    CHECK(b1.fits);
    CHECK(b1.chips[0].kv == 2013265920ull);
    CHECK(b1.chips[0].params == 9389477888ull);
    auto b4 = mp::plan_capacity(*p, 4, 40960, mp::kv_dtype_choice::bf16, limits);
    CHECK_FALSE(b4.fits);
    CHECK(b4.chips[0].kv == 4ull * 2013265920ull);  // 3.75 GiB x 4 per board, halved per chip
    // S8 V-cache saves only V's half, less its scales: per chip 48 layers x 2 KV heads x
    // (128 x (2 + 1) + 4) bytes per token, not 3/4 and never 1/2 of BF16's 48 x 2 x 128 x 4.
    CHECK(mp::kv_bytes_per_token_per_chip(*p, mp::kv_dtype_choice::bf16) == 49152u);
    CHECK(mp::kv_bytes_per_token_per_chip(*p, mp::kv_dtype_choice::s8v) == 37248u);
    CHECK(mp::kv_bytes_per_chip(*p, 1, 40960, mp::kv_dtype_choice::s8v) == 37248ull * 40960);
    const auto c1 = mp::max_context(*p, 1, mp::kv_dtype_choice::bf16, limits);
    const auto c4 = mp::max_context(*p, 4, mp::kv_dtype_choice::bf16, limits);
    CHECK(c1 >= 40960);
    CHECK(c4 < 40960);
    CHECK(mp::plan_capacity(*p, 4, c4, mp::kv_dtype_choice::bf16, limits).fits);
    CHECK_FALSE(mp::plan_capacity(*p, 4, c4 + 1, mp::kv_dtype_choice::bf16, limits).fits);
    tp::remove_scratch(dir);
}

TEST_CASE("qwen3 replica: BF16 V against S8 V, the largest batch x context per chip (issue 29)") {
    const auto dir = tp::pack_preset("qwen3-30b-a3b-2chip", "pkg-replica-s8v");
    auto p = mp::load_package(dir);
    REQUIRE(p.ok());
    const mp::capacity_limits limits;  // 16 GiB per chip, 256 MiB guard
    CHECK(mp::package_kv_choice(*p) == mp::kv_dtype_choice::bf16);
    constexpr std::uint32_t batches[] = {1, 2, 4, 8, 16};
    const auto c = mp::compare_kv_dtypes(*p, batches, limits);
    struct row {
        std::uint32_t batch, bf16, s8v;  // largest context per row
    };
    // chip 0 binds (its parameters are the larger block); S8 V gives each batch ~32% more context.
    for (const row r : {row{1, 77533, 102312}, row{2, 38766, 51156}, row{4, 19383, 25578}, row{8, 9691, 12789},
                        row{16, 4845, 6394}}) {
        INFO("batch " << r.batch);
        const auto at = static_cast<std::size_t>(std::find(std::begin(batches), std::end(batches), r.batch) - batches);
        CHECK(c.bf16.max_context[at] == r.bf16);
        CHECK(c.s8v.max_context[at] == r.s8v);
        for (auto kv : {mp::kv_dtype_choice::bf16, mp::kv_dtype_choice::s8v}) {
            const auto fit = kv == mp::kv_dtype_choice::bf16 ? r.bf16 : r.s8v;
            CHECK(mp::plan_capacity(*p, r.batch, fit, kv, limits).fits);
            CHECK_FALSE(mp::plan_capacity(*p, r.batch, fit + 1, kv, limits).fits);
        }
    }
    // At the calbin context: BF16 holds one row, S8 V two; batch 4 fits with neither.
    CHECK(c.bf16.max_batch_at_context == 1);
    CHECK(c.s8v.max_batch_at_context == 2);
    CHECK(mp::plan_capacity(*p, 2, 40960, mp::kv_dtype_choice::s8v, limits).fits);
    CHECK_FALSE(mp::plan_capacity(*p, 2, 40960, mp::kv_dtype_choice::bf16, limits).fits);
    CHECK_FALSE(mp::plan_capacity(*p, 4, 40960, mp::kv_dtype_choice::s8v, limits).fits);
    tp::remove_scratch(dir);
}

TEST_CASE("capacity: S8 V bytes come from the layout's K dtype and scale dtype") {
    mp::package p;
    p.context = 1000;
    p.topo.tensor_parallel = 2;
    p.kv = {4, 8, 64, mp::dtype::bf16, mp::dtype::bf16, mp::dtype::fp32, 1000, 1, 0, 0};
    struct row {
        mp::dtype k, v, scale;
        mp::kv_dtype_choice choice;
        std::uint64_t per_token;  // per chip: 4 layers x 4 KV heads x (64 x (K + V) + scale)
    };
    for (const row r : {row{mp::dtype::bf16, mp::dtype::bf16, mp::dtype::fp32, mp::kv_dtype_choice::bf16, 16 * 256},
                        row{mp::dtype::bf16, mp::dtype::bf16, mp::dtype::fp32, mp::kv_dtype_choice::s8v, 16 * 196},
                        row{mp::dtype::bf16, mp::dtype::int8, mp::dtype::fp32, mp::kv_dtype_choice::s8v, 16 * 196},
                        row{mp::dtype::bf16, mp::dtype::int8, mp::dtype::bf16, mp::kv_dtype_choice::s8v, 16 * 194},
                        row{mp::dtype::bf16, mp::dtype::int8, mp::dtype::fp32, mp::kv_dtype_choice::bf16, 16 * 256},
                        row{mp::dtype::fp32, mp::dtype::bf16, mp::dtype::fp32, mp::kv_dtype_choice::s8v, 16 * 324}}) {
        p.kv.k_dtype = r.k, p.kv.v_dtype = r.v, p.kv.v_scale_dtype = r.scale;
        INFO("k " << mp::to_string(r.k) << " v " << mp::to_string(r.v) << " plan " << mp::to_string(r.choice));
        CHECK(mp::kv_bytes_per_token_per_chip(p, r.choice) == r.per_token);
        CHECK(mp::kv_bytes_per_chip(p, 3, 100, r.choice) == r.per_token * 300);
        CHECK(mp::package_kv_choice(p) == (r.v == mp::dtype::int8 ? mp::kv_dtype_choice::s8v : mp::kv_dtype_choice::bf16));
    }
    // The package's own bytes per token (all chips) count the scales too.
    p.kv.k_dtype = mp::dtype::bf16, p.kv.v_dtype = mp::dtype::int8, p.kv.v_scale_dtype = mp::dtype::fp32;
    CHECK(p.kv.bytes_per_token_total() == 2 * 16 * 196u);
}
