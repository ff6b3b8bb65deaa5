// Property: for many seeded random schemas and a seeded random "model" (random logits,
// drawn within the mask by the project's sampler), every output that completes parses
// (Boost.JSON) and validates against its schema with the jsonschema library
// (tests/model/grammar_validate.py), and the mask is never empty before the grammar ends.
#include <boost/json.hpp>
#include <cstdlib>
#include <fstream>
#include <random>

#include "tests/model/grammar_fixture.hpp"
#include "tests/model/grammar_random_model.hpp"
#include "tests/model/schema_generator.hpp"

namespace calserve::test {
namespace {

namespace json = boost::json;

struct run_stats {
    int documents = 0;
    int completed = 0;
};

}  // namespace

TEST_CASE("Generated documents validate against their schemas (jsonschema)", "[grammar][qwen3][property]") {
    const auto vocab = qwen3_vocab();
    gr::compile_cache cache(vocab);
    const auto dir = scratch_dir("grammar-property");
    const auto cases = dir / "cases.jsonl";
    std::ofstream out(cases);
    run_stats stats;
    const std::uint64_t schemas = std::getenv("CALSERVE_SANITIZED") ? 10 : 40;  // sanitizers: 4x slower steps
    for (std::uint64_t seed = 1; seed <= schemas; ++seed) {
        const std::string schema = json::serialize(schema_generator(seed).schema());
        INFO("seed " << seed << " schema " << schema);
        auto c = cache.get(gr::grammar_kind::json_schema, schema);
        if (!c) FAIL(c.error().what());
        for (std::uint64_t doc = 0; doc < 3; ++doc) {
            ++stats.documents;
            const auto text = random_model_completion(c.value(), *vocab, seed * 100 + doc, 300, 12.0f);
            if (!text) continue;
            ++stats.completed;
            boost::system::error_code ec;
            (void)json::parse(*text, ec);
            INFO("output " << *text);
            CHECK_FALSE(ec);
            out << json::serialize(json::object{{"schema", json::parse(schema)}, {"output", *text}}) << "\n";
        }
    }
    out.close();
    INFO(stats.completed << " of " << stats.documents << " documents completed");
    CHECK(stats.completed * 10 >= stats.documents * 8);
    const std::string cmd = "python3 '" + (source_dir() / "tests/model/grammar_validate.py").string() + "' '" +
                            cases.string() + "' > '" + (dir / "validate.log").string() + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream log(dir / "validate.log");
    const std::string report((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    INFO(report << "(needs python3-jsonschema: tools/bootstrap)");
    CHECK(rc == 0);
}

}  // namespace calserve::test
