// calserve pack --decode-batches, plan and inspect on a package with decode batch profiles, end to end.
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <sys/wait.h>

#include "model/package/capacity.hpp"
#include "model/package/package.hpp"
#include "cli_run.hpp"
#include "tests/support/test_paths.hpp"

namespace mp = calserve::model::package;
namespace fs = std::filesystem;

namespace {

using calserve::test::run_result;

run_result run(const std::string& args) { return calserve::test::run_calserve(args); }

// "  b4, past 0    12.345 ms ..." -> 12.345
double step_ms(const std::string& out, const std::string& label) {
    const auto at = out.find("  " + label + " ");
    REQUIRE(at != std::string::npos);
    double ms = 0;
    REQUIRE(std::sscanf(out.c_str() + at + 2 + label.size(), "%lf ms", &ms) == 1);
    return ms;
}

}  // namespace

TEST_CASE("cli: pack --decode-batches, then plan gives each profile's largest context and inspect its step times") {
    const auto dir = calserve::test::scratch_dir("pkg-cli") / "pkg";
    const auto tok = " --tokenizer " + calserve::test::tokenizer_dir().string();
    auto packed = run("pack --preset tiny-dense-1chip --decode-batches 1,2,4 --out " + dir.string() + tok);
    INFO(packed.out);
    REQUIRE(packed.exit_code == 0);
    CHECK(packed.out.find("decode batches 1,2,4") != std::string::npos);
    CHECK(run("validate -q " + dir.string()).exit_code == 0);
    CHECK(run("pack --preset tiny-dense-1chip --decode-batches 1,32 --out " + dir.string() + "-x" + tok).exit_code == 2);

    auto plan = run("plan " + dir.string() + " --json");
    INFO(plan.out);
    REQUIRE(plan.exit_code == 0);
    const auto doc = boost::json::parse(plan.out);
    const auto& profiles = doc.at("decode_profiles").as_array();
    REQUIRE(profiles.size() == 3);
    auto p = mp::load_package(dir);
    REQUIRE(p.ok());
    const mp::capacity_limits limits;  // the config defaults: 16 GiB, 64 MiB SRAM, 256 MiB guard
    std::uint64_t previous = 0;
    for (std::size_t i = 0; i < profiles.size(); ++i) {
        const auto& row = profiles[i].as_object();
        const auto batch = static_cast<std::uint32_t>(row.at("batch").to_number<std::uint64_t>());
        const auto fit = static_cast<std::uint32_t>(row.at("max_context").to_number<std::uint64_t>());
        CHECK(batch == (1u << i));
        CHECK(row.at("submodel").as_string() == "tiny_dense_decode_b" + std::to_string(batch) + "_c4096");
        CHECK(mp::plan_capacity(*p, batch, fit, mp::kv_dtype_choice::bf16, limits).fits);
        CHECK_FALSE(mp::plan_capacity(*p, batch, fit + 1, mp::kv_dtype_choice::bf16, limits).fits);
        CHECK(row.at("usable_context").to_number<std::uint64_t>() == 4096);
        CHECK(row.at("kv_tokens_per_row").to_number<std::uint64_t>() == std::min<std::uint64_t>(4096, 4 * 4096 / batch));
        if (i > 0) CHECK(fit < previous);
        previous = fit;
    }
    auto text = run("plan " + dir.string());
    CHECK(text.out.find("  b4  tiny_dense_decode_b4_c4096: fits up to ") != std::string::npos);

    auto inspect = run("inspect " + dir.string());
    INFO(inspect.out);
    REQUIRE(inspect.exit_code == 0);
    CHECK(inspect.out.find("decode batch profiles (largest 4; KV region 4 x 4096 tokens") != std::string::npos);
    for (const std::string b : {"1", "2", "4"})
        CHECK(inspect.out.find("  b" + b + "  tiny_dense_decode_b" + b + "_c4096\n") != std::string::npos);
    // Weights are read once per step, so a batch-4 step costs more than one row and less than four.
    const double b1 = step_ms(inspect.out, "b1, past 2048"), b4 = step_ms(inspect.out, "b4, past 2048");
    CHECK(b4 > b1);
    CHECK(b4 < 4 * b1);
    std::error_code ec;
    fs::remove_all(dir.parent_path(), ec);
}

TEST_CASE("cli: pack --kv-dtype s8v writes an S8 V layout that validates, and plan and inspect compare it with BF16 V") {
    const auto dir = calserve::test::scratch_dir("pkg-cli-s8v") / "pkg";
    const auto tok = " --tokenizer " + calserve::test::tokenizer_dir().string();
    auto packed = run("pack --preset tiny-dense-1chip --kv-dtype s8v --out " + dir.string() + tok);
    INFO(packed.out);
    REQUIRE(packed.exit_code == 0);
    CHECK(packed.out.find("V INT8") != std::string::npos);
    CHECK(run("validate -q " + dir.string()).exit_code == 0);
    auto p = mp::load_package(dir);
    REQUIRE(p.ok());
    CHECK(p->kv.v_dtype == mp::dtype::int8);
    CHECK(p->kv.v_scale_dtype == mp::dtype::fp32);
    CHECK(p->kv.bytes_total == p->kv.bytes_per_token_total() * p->kv.context * p->kv.batch);
    CHECK(mp::package_kv_choice(*p) == mp::kv_dtype_choice::s8v);

    auto plan = run("plan " + dir.string() + " --json");
    INFO(plan.out);
    REQUIRE(plan.exit_code == 0);
    const auto doc = boost::json::parse(plan.out);
    CHECK(doc.at("kv_dtype").as_string() == "s8v");  // the package's own by default
    const auto& kv = doc.at("kv_dtypes").as_object();
    const auto bf16 = kv.at("bf16").at("bytes_per_token_per_chip").to_number<std::uint64_t>();
    const auto s8v = kv.at("s8v").at("bytes_per_token_per_chip").to_number<std::uint64_t>();
    CHECK(bf16 == mp::kv_bytes_per_token_per_chip(*p, mp::kv_dtype_choice::bf16));
    CHECK(s8v == mp::kv_bytes_per_token_per_chip(*p, mp::kv_dtype_choice::s8v));
    CHECK(s8v < bf16);
    CHECK(2 * s8v > bf16);  // V's half only
    CHECK(run("plan " + dir.string()).out.find("BF16 V vs S8 V") != std::string::npos);
    auto inspect = run("inspect " + dir.string());
    INFO(inspect.out);
    REQUIRE(inspect.exit_code == 0);
    CHECK(inspect.out.find("KV dtype  this package: s8v") != std::string::npos);
    CHECK(inspect.out.find("V 1 B) + V scale 4 B)") != std::string::npos);
    std::error_code ec;
    fs::remove_all(dir.parent_path(), ec);
}
