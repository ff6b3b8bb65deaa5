// calserve reference --routing, then plan --placement ep --routing, end to end on the
// tiny MoE package: the counts the reference model records price the ep row, and a
// file that does not match the package is refused.
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <sys/wait.h>

#include "model/core/routing_counts.hpp"
#include "model/package/package.hpp"
#include "cli_run.hpp"
#include "tests/support/test_paths.hpp"

namespace mp = calserve::model::package;
namespace fs = std::filesystem;

namespace {

using calserve::test::run_result;

run_result run(const std::string& args) { return calserve::test::run_calserve(args, "2>&1"); }

std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("cli: reference --routing records counts, plan --placement ep --routing prices the ep row with them") {
    const auto root = calserve::test::scratch_dir("routing-cli");
    const auto dir = root / "pkg";
    const auto tok = " --tokenizer " + calserve::test::tokenizer_dir().string();
    REQUIRE(run("pack --preset tiny-moe-2chip --out " + dir.string() + tok).exit_code == 0);
    auto p = mp::load_package(dir);
    REQUIRE(p);
    REQUIRE(!p->reference_model_dir.empty());
    {
        std::ofstream prompts(root / "prompts.jsonl");
        prompts << R"({"id": 1, "token_ids": [1, 2, 3, 4, 5, 6, 7, 8]})" << "\n"
                << R"({"id": 2, "token_ids": [9, 10, 11, 12]})" << "\n";
    }
    const auto counts_file = root / "counts.json";
    auto ref = run("reference --model " + p->reference_model_dir.string() + " --prompts " + (root / "prompts.jsonl").string() +
                   " --output " + (root / "out.jsonl").string() + " --max-tokens 3 --routing " + counts_file.string());
    INFO(ref.out);
    REQUIRE(ref.exit_code == 0);
    auto counts = calserve::model::parse_routing_counts(slurp(counts_file));
    REQUIRE(counts);
    // 12 prompt tokens, then 2 decode steps per prompt (the third token is sampled from the second's logits).
    const std::uint64_t tokens = counts->tokens.front();
    CHECK(tokens >= 12);
    for (std::size_t l = 0; l < counts->layers(); ++l) {
        std::uint64_t pairs = 0;
        for (auto n : counts->experts[l]) pairs += n;
        CHECK(pairs == counts->tokens[l] * std::uint64_t(counts->top_k));
    }

    auto plan = run("plan " + dir.string() + " --placement ep --json --routing " + counts_file.string());
    INFO(plan.out);
    REQUIRE(plan.exit_code == 0);
    const auto row = boost::json::parse(plan.out).as_object();
    CHECK(row.at("routing").as_string() == "counts");
    CHECK(row.at("imbalance").as_double() >= 1.0);
    CHECK(row.at("layer_imbalance").as_array().size() == counts->layers());
    CHECK(row.contains("decode_step_ms"));
    auto text = run("plan " + dir.string() + " --placement ep --routing " + counts_file.string() + " --skews 0");
    CHECK(text.exit_code == 0);
    CHECK(text.out.find("ep counts") != std::string::npos);
    CHECK(text.out.find("ep skew 0.0") != std::string::npos);
    CHECK(text.out.find("per layer, min") != std::string::npos);

    // A table for another model: fewer layers, then a malformed file.
    auto other = *counts;
    other.experts.pop_back();
    other.tokens.pop_back();
    std::ofstream(root / "other.json") << calserve::model::to_json_text(other);
    auto refused = run("plan " + dir.string() + " --placement ep --routing " + (root / "other.json").string());
    CHECK(refused.exit_code == 2);
    CHECK(refused.out.find("do not match the package") != std::string::npos);
    std::ofstream(root / "bad.json") << "{}";
    CHECK(run("plan " + dir.string() + " --placement ep --routing " + (root / "bad.json").string()).exit_code == 2);
    CHECK(run("plan " + dir.string() + " --placement ep --routing " + (root / "missing.json").string()).exit_code == 2);
}
