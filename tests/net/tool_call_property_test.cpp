// Property: for seeded random tool sets (function names with generated parameters
// schemas) and a seeded random "model" (random logits drawn within the mask by the
// project's sampler), the forced tool-call grammar the API compiles for tool_choice
// required / named (net::tool_call_ebnf) yields outputs that the chat output parser
// (model/chat_output) turns into tool calls naming an offered function (the named one
// when named) whose arguments validate against that function's parameters schema with
// the jsonschema library (tests/model/grammar_validate.py); the mask is never empty
// before the grammar ends.
#include <boost/json.hpp>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "model/chat/output.hpp"
#include "model/sampling/sampling.hpp"
#include "net/output_constraint.hpp"
#include "tests/model/grammar_fixture.hpp"
#include "tests/model/grammar_random_model.hpp"
#include "tests/model/schema_generator.hpp"

namespace calserve::test {
namespace {

namespace json = boost::json;

// The vocabulary the serving engine builds (engine/serving_engine.cpp): Qwen3's added
// tokens that decode as text (<tool_call>, </tool_call>, ...) may spell grammar text.
std::shared_ptr<const gr::vocabulary> engine_vocab() {
    static const auto v = [] {
        auto tok = qwen3_tokenizer();
        std::vector<std::int32_t> text_added;
        for (const auto id : tok->added_token_ids())
            if (!tok->is_special(id)) text_added.push_back(id);
        REQUIRE(!text_added.empty());
        return gr::vocabulary::build(*tok, tok->eos_token_ids(), text_added);
    }();
    return v;
}

constexpr int k_max_steps = 400;  // tool-call wrappers add ~20 forced tokens per call

// A request's tools: 1-3 functions, one without parameters now and then (any JSON object).
net::api_output_spec tool_spec(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    net::api_output_spec spec;
    const std::size_t n = 1 + rng() % 3;
    for (std::size_t i = 0; i < n; ++i) {
        net::api_tool tool;
        tool.name = (i % 2 ? "get-item_" : "lookup_") + std::to_string(i);
        if (rng() % 5 != 0) tool.parameters_json = json::serialize(schema_generator(seed * 10 + i).schema());
        spec.tools.push_back(std::move(tool));
    }
    if (seed % 2 == 0) {
        spec.tool_choice = net::tool_choice_kind::required;
    } else {
        spec.tool_choice = net::tool_choice_kind::named;
        spec.tool_name = spec.tools[rng() % n].name;
    }
    return spec;
}

struct parsed_call {
    std::string name;
    std::string arguments;
};

// The output as the chat endpoint parses it (tools mode, no reasoning), pushed in
// uneven pieces as the engine would release it.
std::vector<parsed_call> parse_calls(const std::string& text, std::string& content) {
    model::chat_output_parser parser({false, true, "call_p"});
    std::map<std::size_t, parsed_call> calls;
    auto take = [&](const model::chat_delta& d) {
        content += d.content;
        for (const auto& t : d.tool_calls) {
            auto& c = calls[t.index];
            if (t.opens) c.name = t.name;
            c.arguments += t.arguments;
        }
    };
    for (std::size_t at = 0, piece = 1; at < text.size(); at += piece, piece = piece % 7 + 1) {
        take(parser.push(std::string_view(text).substr(at, piece)));
    }
    take(parser.finish());
    std::vector<parsed_call> out;
    for (auto& [index, c] : calls) out.push_back(std::move(c));
    return out;
}

std::size_t count_blocks(const std::string& text) {
    std::size_t n = 0;
    for (auto at = text.find("<tool_call>"); at != std::string::npos; at = text.find("<tool_call>", at + 1)) ++n;
    return n;
}

}  // namespace

TEST_CASE("Forced tool calls parse and their arguments validate against the parameters (jsonschema)",
          "[tools][grammar][qwen3][property]") {
    const auto vocab = engine_vocab();
    gr::compile_cache cache(vocab);
    const auto dir = scratch_dir("tool-call-property");
    const auto cases = dir / "cases.jsonl";
    std::ofstream out(cases);
    int completions = 0;
    int completed = 0;
    std::size_t calls_seen = 0;
    const std::uint64_t specs = std::getenv("CALSERVE_SANITIZED") ? 3 : 12;  // sanitizers: 4x slower steps
    for (std::uint64_t seed = 1; seed <= specs; ++seed) {
        const auto spec = tool_spec(seed);
        auto ebnf = net::tool_call_ebnf(spec);
        REQUIRE(ebnf);
        INFO("seed " << seed << " grammar\n" << *ebnf);
        auto c = cache.get(gr::grammar_kind::ebnf, *ebnf);
        if (!c) FAIL(c.error().what());
        std::map<std::string, std::string> params;  // name -> schema the arguments must satisfy
        for (const auto& t : spec.tools) params[t.name] = t.parameters_json.empty() ? R"({"type":"object"})" : t.parameters_json;
        for (std::uint64_t doc = 0; doc < 3; ++doc) {
            ++completions;
            // Without an EOS bias, a required choice often goes on to a second call.
            const std::uint64_t gen_seed = seed * 100 + doc;
            const auto text =
                random_model_completion(c.value(), *vocab, gen_seed, k_max_steps, gen_seed % 2 ? 0.0f : 12.0f);
            if (!text) continue;
            ++completed;
            INFO("output " << *text);
            std::string content;
            const auto calls = parse_calls(*text, content);
            CHECK(content.empty());
            REQUIRE(!calls.empty());
            CHECK(calls.size() == count_blocks(*text));
            if (spec.tool_choice == net::tool_choice_kind::named) CHECK(calls.size() == 1);
            for (const auto& call : calls) {
                INFO("call " << call.name << " arguments " << call.arguments);
                REQUIRE(params.count(call.name) == 1);
                if (spec.tool_choice == net::tool_choice_kind::named) CHECK(call.name == spec.tool_name);
                boost::system::error_code ec;
                (void)json::parse(call.arguments, ec);
                CHECK_FALSE(ec);
                out << json::serialize(json::object{{"schema", json::parse(params[call.name])},
                                                    {"output", call.arguments}})
                    << "\n";
                ++calls_seen;
            }
        }
    }
    out.close();
    INFO(completed << " of " << completions << " completions completed, " << calls_seen << " calls");
    CHECK(completed * 10 >= completions * 8);
    const std::string cmd = "python3 '" + (source_dir() / "tests/model/grammar_validate.py").string() + "' '" +
                            cases.string() + "' > '" + (dir / "validate.log").string() + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream log(dir / "validate.log");
    const std::string report((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    INFO(report << "(needs python3-jsonschema: tools/bootstrap)");
    CHECK(rc == 0);
}

}  // namespace calserve::test
