// Output constraints on the serving path (actors/sequence.hpp sequence_constraint):
// the Sampler masks each draw by the request's grammar and the request ends with
// `stop` once the grammar is complete; the reasoning budget forces </think>; a
// device fault mid-answer is recovered with the same constrained output (the
// matcher stays with the sequence, as its sampled tokens do).
#include <catch2/catch.hpp>

#include <boost/json.hpp>

#include "device/fault_points.hpp"
#include "tests/actors/engine_fixture.hpp"
#include "tests/support/model_support.hpp"

using namespace calserve;
using namespace calserve::actors;
using calserve::test::engine_harness;
using calserve::test::recording_sink;

namespace {
// A finite language: every answer is complete within a few dozen tokens.
const char* const k_schema =
    R"({"type": "object", "properties": {"ok": {"type": "boolean"}, "tier": {"enum": ["free", "pro", "team"]},
        "n": {"type": "array", "items": {"enum": [1, 22, 333]}, "minItems": 2, "maxItems": 4}},
        "required": ["ok", "tier", "n"], "additionalProperties": false})";

generation_request constrained(engine_harness& h, std::string id, std::uint64_t seed) {
    auto r = h.greedy(std::move(id), calserve::test::random_prompt(seed, 7), 200);
    r.sampling.temperature = 1;
    r.sampling.seed = seed;
    r.constraint.kind = model::grammar::grammar_kind::json_schema;
    r.constraint.grammar = k_schema;
    auto g = h.engine->compile_grammar(r.constraint.kind, r.constraint.grammar);
    if (!g) FAIL(g.error().what());
    r.constraint.compiled = *g;
    return r;
}

void check_answer(const std::string& text) {
    INFO(text);
    boost::system::error_code ec;
    auto v = boost::json::parse(text, ec);
    REQUIRE_FALSE(ec);
    const auto& o = v.as_object();
    CHECK(o.size() == 3);
    CHECK(o.at("ok").is_bool());
    std::string tier(o.at("tier").as_string());
    CHECK((tier == "free" || tier == "pro" || tier == "team"));
    const auto& n = o.at("n").as_array();
    CHECK((n.size() >= 2 && n.size() <= 4));
}
}  // namespace

TEST_CASE("a constrained request answers by its schema and ends with stop", "[engine][constraint]") {
    engine_harness h;
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
        auto sink = std::make_shared<recording_sink>();
        REQUIRE(h.engine->submit(constrained(h, "c" + std::to_string(seed), seed), sink).ok());
        h.run_until_done();
        REQUIRE(sink->finishes == 1);
        CHECK(sink->result.reason == finish_reason::stop);
        check_answer(sink->text);
    }
    CHECK(h.rt.failures().empty());
}

TEST_CASE("a constraint without its compiled grammar (a replayed trace) is compiled at submit", "[engine][constraint]") {
    engine_harness h;
    auto with = constrained(h, "a", 9);
    auto without = constrained(h, "b", 9);
    without.constraint.compiled.reset();
    auto s1 = std::make_shared<recording_sink>();
    auto s2 = std::make_shared<recording_sink>();
    REQUIRE(h.engine->submit(with, s1).ok());
    h.run_until_done();
    REQUIRE(h.engine->submit(without, s2).ok());
    h.run_until_done();
    CHECK(s1->tokens == s2->tokens);
    // A grammar that does not compile is refused at submit.
    auto bad = constrained(h, "c", 1);
    bad.constraint.compiled.reset();
    bad.constraint.grammar = R"({"type": "object", "properties": {"a": {"not": {}}}})";
    CHECK(h.engine->submit(bad, s2).code() == status::invalid_argument);
}

TEST_CASE("a device fault mid-answer keeps the constrained output", "[engine][constraint][faults]") {
    std::vector<token_id> expected;
    {
        engine_harness h;
        auto sink = std::make_shared<recording_sink>();
        REQUIRE(h.engine->submit(constrained(h, "r", 5), sink).ok());
        h.run_until_done();
        expected = sink->tokens;
    }
    REQUIRE(expected.size() >= 6);
    engine_harness h;
    auto sink = std::make_shared<recording_sink>();
    REQUIRE(h.engine->submit(constrained(h, "r", 5), sink).ok());
    h.rt.run_until_idle();
    while (sink->tokens.size() < 3 && h.rt.advance_to_next_timer()) {
    }
    device::fault_spec spec;
    spec.point = device::fault_point::ccu_exception;
    spec.mode = device::arm_mode::once;
    REQUIRE(h.engine->faults()->arm(spec).ok());
    h.run_until_done();
    CHECK(h.engine->faults()->fires(device::fault_point::ccu_exception) == 1);
    REQUIRE(sink->finishes == 1);
    CHECK(sink->result.reason == finish_reason::stop);
    CHECK(sink->tokens == expected);
    check_answer(sink->text);
}

TEST_CASE("the reasoning budget forces </think>, then the grammar applies", "[engine][constraint]") {
    engine_harness h;
    auto r = constrained(h, "t", 3);
    r.constraint.thinking = true;
    r.constraint.max_reasoning_tokens = 4;
    auto sink = std::make_shared<recording_sink>();
    REQUIRE(h.engine->submit(r, sink).ok());
    h.run_until_done();
    REQUIRE(sink->finishes == 1);
    const auto think_end = 151668;  // </think> in the Qwen3 vocabulary
    REQUIRE(sink->tokens.size() > 5);
    auto end = std::find(sink->tokens.begin(), sink->tokens.end(), think_end);
    REQUIRE(end != sink->tokens.end());
    CHECK(end - sink->tokens.begin() <= 4);
    auto close = sink->text.find("</think>");
    REQUIRE(close != std::string::npos);
    CHECK(sink->result.reason == finish_reason::stop);
    check_answer(sink->text.substr(close + 8));
}
