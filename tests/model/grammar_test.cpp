// The grammar engine: EBNF syntax and semantics, schema conversion errors, and the mask
// against a brute-force reference over the Qwen3 vocabulary.
#include <random>

#include "tests/model/grammar_fixture.hpp"

namespace calserve::test {
namespace {

std::string compile_error(std::string_view ebnf) {
    auto c = gr::compile(ebnf, byte_vocab());
    REQUIRE_FALSE(c.ok());
    CHECK(c.error().code == status::invalid_argument);
    return c.error().message;
}

std::string schema_error(std::string_view schema) {
    auto e = gr::json_schema_to_ebnf(schema);
    REQUIRE_FALSE(e.ok());
    CHECK(e.code() == status::invalid_argument);
    return e.error().message;
}

std::string schema_ebnf(std::string_view schema) {
    auto e = gr::json_schema_to_ebnf(schema);
    if (!e) FAIL(e.error().what());
    return e.value();
}

}  // namespace

TEST_CASE("EBNF errors name the line and column", "[grammar]") {
    CHECK(compile_error("root ::= \"a\" foo") == "1:14: undefined rule 'foo'");
    CHECK(compile_error("root ::= \"a\"\nx ::= (\"b\"") == "2:7: unclosed '('");
    CHECK(compile_error("root ::= [b-a]") == "1:10: class range out of order");
    CHECK(compile_error("x ::= \"a\"") == "1:1: no rule 'root'");
    CHECK(compile_error("root ::= \"a") == "1:10: unterminated literal");
    CHECK(compile_error("root ::= \"\\q\"") == "1:11: bad escape");
    CHECK(compile_error("root ::= root \"a\" | \"b\"").find("left recursion through rule 'root'") != std::string::npos);
    CHECK(compile_error("root ::= \"a\" root") == "1:1: rule 'root' can never finish (recursion without a base case)");
    CHECK(compile_error("root ::= \"a\"{3,2}") == "1:13: repetition {m,n} with n < m");
    CHECK(compile_error("root ::= \"a\"{99999}").find("repetition bound above") != std::string::npos);
    CHECK(compile_error("root ::= \"a\"\nroot ::= \"b\"") == "2:1: rule 'root' defined twice");
    CHECK(compile_error("root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')')).find("nested too deeply") !=
          std::string::npos);
    std::string wide = "root ::= (\"a\"";
    for (int i = 0; i < 600; ++i) wide += " | \"b" + std::to_string(i) + "\"";
    CHECK(compile_error(wide + "){4000}").find("too large after expanding repetitions") != std::string::npos);
}

TEST_CASE("EBNF literals, classes, groups and repetitions", "[grammar]") {
    CHECK(matches(R"(root ::= "ab" "c")", "abc"));
    CHECK_FALSE(matches(R"(root ::= "ab" "c")", "ab"));
    CHECK(matches(R"(root ::= "\"\\\n\x41\u00e9")", "\"\\\nA\xc3\xa9"));
    CHECK(matches(R"(root ::= [a-c]+)", "abcabc"));
    CHECK_FALSE(matches(R"(root ::= [a-c]+)", ""));
    CHECK_FALSE(matches(R"(root ::= [a-c]+)", "abd"));
    CHECK(matches(R"(root ::= [^a-c]*)", "xyz\xe4\xb8\xad"));  // any UTF-8 character but a-c
    CHECK_FALSE(matches(R"(root ::= [^a-c]*)", "xbz"));
    CHECK_FALSE(matches(R"(root ::= [^a]*)", "\xff"));         // not UTF-8
    CHECK_FALSE(matches(R"(root ::= [^a]*)", "\xed\xa0\x80"));  // a surrogate
    CHECK(matches(R"(root ::= [α-ω])", "\xce\xbb"));          // λ
    CHECK(matches(R"(root ::= .)", "\xf0\x9f\x98\x80"));       // one 4-byte character
    CHECK(matches(R"(root ::= ("a" | "bc")* "d"?)", "abcad"));
    CHECK(matches(R"(root ::= ("a" | "bc")* "d"?)", ""));
    CHECK_FALSE(matches(R"(root ::= ("a" | "bc")* "d"?)", "abd d"));
    CHECK(matches(R"(root ::= "x"{3})", "xxx"));
    CHECK_FALSE(matches(R"(root ::= "x"{3})", "xx"));
    CHECK_FALSE(matches(R"(root ::= "x"{3})", "xxxx"));
    CHECK(matches(R"(root ::= "x"{2,3})", "xx"));
    CHECK(matches(R"(root ::= "x"{2,3})", "xxx"));
    CHECK_FALSE(matches(R"(root ::= "x"{2,3})", "xxxx"));
    CHECK(matches(R"(root ::= "x"{2,} # comment
)", "xxxxx"));
    CHECK(matches("root ::= a b\na ::= \"1\" | \"\"\nb ::= \"2\"", "2"));
    CHECK(matches("root ::= \"(\" root \")\" | \"\"", "((()))"));
    CHECK_FALSE(matches("root ::= \"(\" root \")\" | \"\"", "(()"));
}

TEST_CASE("EOS only where the grammar accepts, terminated when nothing can follow", "[grammar]") {
    gr::matcher m(compile_ok(R"(root ::= "a" "b"?)", byte_vocab()));
    std::vector<std::uint32_t> mask(m.mask_words());
    auto allowed = [&](int t) { return (mask[static_cast<std::size_t>(t) / 32] >> (t % 32) & 1u) != 0; };
    m.fill_mask(mask);
    CHECK(allowed('a'));
    CHECK_FALSE(allowed('b'));
    CHECK_FALSE(allowed(256));
    CHECK_FALSE(m.accept(256));
    CHECK_FALSE(m.accept('b'));  // refused, state unchanged
    REQUIRE(m.accept('a'));
    m.fill_mask(mask);
    CHECK(allowed('b'));
    CHECK(allowed(256));
    CHECK(m.accepting());
    CHECK_FALSE(m.terminated());
    REQUIRE(m.accept('b'));
    CHECK(m.terminated());
    m.fill_mask(mask);
    CHECK(allowed(256));
    CHECK_FALSE(allowed('b'));
    CHECK(m.accept(256));
    CHECK(m.bytes_consumed() == 2);
}

TEST_CASE("Schema errors name the JSON pointer of the node", "[grammar]") {
    CHECK(schema_error(R"({"type":"object","properties":{"tags":{"type":"array","items":{"not":{}}}}})") ==
          "/properties/tags/items: unsupported keyword 'not'");
    CHECK(schema_error(R"({"type":"strin"})") == "/type: unknown type 'strin'");
    CHECK(schema_error(R"({"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}},)"
                       R"("required":["next"]}},"$ref":"#/$defs/n"})") == "/$defs/n: recursion without a base case");
    CHECK(schema_error(R"({"$ref":"#/$defs/missing"})") == "/$ref: unresolved reference '#/$defs/missing'");
    CHECK(schema_error(R"({"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":true})") ==
          "/additionalProperties: must be false when 'properties' are given");
    // fuzz_grammar_schema, 2026-12-02: a non-object "properties" was read as an object (Boost.JSON threw).
    CHECK(schema_error(R"({"type":"object","properties":"string"})") == "/properties: must be an object");
    CHECK(schema_error(R"({"type":"array","minItems":3,"maxItems":2})") == "(root): maxItems < minItems");
    CHECK(schema_error(R"J({"type":"string","pattern":"(?=a)"})J").rfind("/pattern: pattern: unsupported group", 0) == 0);
    CHECK(schema_error("{") .rfind("(root): schema is not JSON", 0) == 0);
    CHECK(schema_error(R"({"type":"number","minimum":1})") == "(root): unsupported keyword 'minimum' for type number");
    std::string chain = R"({"$ref":"#/$defs/d0","$defs":{)";
    for (int i = 0; i < 100; ++i) chain += "\"d" + std::to_string(i) + R"(":{"$ref":"#/$defs/d)" + std::to_string(i + 1) + "\"},";
    chain += R"("d100":{"type":"null"}}})";
    CHECK(schema_error(chain).find("schema nested too deeply") != std::string::npos);
}

TEST_CASE("Schema grammars accept exactly the compact documents", "[grammar]") {
    const std::string person = schema_ebnf(
        R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":130},)"
        R"("tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":2},"nick":{"type":["string","null"]}},)"
        R"("required":["name","age","tags"],"additionalProperties":false})");
    CHECK(matches(person, R"({"name":"Ann \"A\" \u00e9","age":130,"tags":["a","b"]})"));
    CHECK(matches(person, R"({"name":"","age":0,"tags":[],"nick":null})"));
    CHECK_FALSE(matches(person, R"({"name":"x","age":131,"tags":[]})"));
    CHECK_FALSE(matches(person, R"({"name":"x","age":01,"tags":[]})"));
    CHECK_FALSE(matches(person, R"({"name":"x","age":1,"tags":["a","b","a"]})"));
    CHECK_FALSE(matches(person, R"({"age":1,"name":"x","tags":[]})"));  // schema order
    CHECK_FALSE(matches(person, R"({"name": "x","age":1,"tags":[]})"));  // compact
    CHECK_FALSE(matches(person, "{\"name\":\"\x01\",\"age\":1,\"tags\":[]}"));
    const std::string range = schema_ebnf(R"({"type":"integer","minimum":-25,"exclusiveMaximum":1000})");
    for (int v = -40; v < 1100; ++v) {
        INFO(v);
        CHECK(matches(range, std::to_string(v)) == (v >= -25 && v < 1000));
    }
    CHECK_FALSE(matches(range, "-0"));
    const std::string pattern = schema_ebnf(R"({"type":"string","pattern":"^[A-Z]{2}-\\d+(\\.x)?$"})");
    CHECK(matches(pattern, R"("AB-12")"));
    CHECK(matches(pattern, R"("AB-12.x")"));
    CHECK_FALSE(matches(pattern, R"("AB-")"));
    CHECK_FALSE(matches(pattern, R"("ab-1")"));
    const std::string sized = schema_ebnf(R"({"type":"string","minLength":2,"maxLength":3})");
    CHECK(matches(sized, "\"\xc3\xa9\\n\""));
    CHECK_FALSE(matches(sized, "\"a\""));
    CHECK_FALSE(matches(sized, "\"abcd\""));
    CHECK(matches(gr::json_object_ebnf(), R"({"a":[1,-2.5e3,true,null,{"b":"c"}],"d":{}})"));
    CHECK_FALSE(matches(gr::json_object_ebnf(), R"([1])"));
}

TEST_CASE("Compile cache: bounded, keyed by kind and text, shared results", "[grammar]") {
    gr::compile_cache cache(byte_vocab(), 2);
    auto a = cache.get(gr::grammar_kind::ebnf, R"(root ::= "a")");
    auto a2 = cache.get(gr::grammar_kind::ebnf, R"(root ::= "a")");
    REQUIRE(a.ok());
    REQUIRE(a2.ok());
    CHECK(a.value() == a2.value());
    CHECK(cache.hits() == 1);
    REQUIRE(cache.get(gr::grammar_kind::json_schema, R"({"type":"integer"})").ok());
    REQUIRE(cache.get(gr::grammar_kind::json_object, "").ok());
    CHECK(cache.size() == 2);
    CHECK(cache.get(gr::grammar_kind::ebnf, R"(root ::= "a")").value() != a.value());  // evicted, recompiled
    CHECK(cache.get(gr::grammar_kind::ebnf, "root ::= (").code() == status::invalid_argument);
}

namespace {

// Walks `steps` random tokens through the grammar, comparing every mask with the
// reference: token t allowed iff its bytes extend the reference state; EOS iff accepting.
void check_against_reference(std::string_view ebnf, std::uint32_t seed, int steps) {
    const auto vocab = qwen3_vocab();
    gr::matcher m(compile_ok(ebnf, vocab));
    reference_parser ref(ebnf);
    std::mt19937 rng(seed);
    std::vector<std::uint32_t> mask(m.mask_words());
    for (int step = 0; step < steps && !m.terminated(); ++step) {
        m.fill_mask(mask);
        std::vector<std::int32_t> allowed;
        for (std::int32_t t = 0; t < static_cast<std::int32_t>(vocab->size()); ++t) {
            const bool got = (mask[static_cast<std::size_t>(t) / 32] >> (t % 32) & 1u) != 0;
            const bool want = vocab->is_text(t) ? ref.can_take(vocab->bytes(t)) : vocab->is_eos(t) && ref.accepting();
            if (got != want) FAIL("step " << step << " token " << t << " '" << vocab->bytes(t) << "': mask " << got);
            if (got && vocab->is_text(t)) allowed.push_back(t);
        }
        REQUIRE(m.accepting() == ref.accepting());
        if (allowed.empty()) break;
        // Prefer long tokens now and then so that tokens crossing several elements are taken.
        std::int32_t pick = allowed[rng() % allowed.size()];
        if (rng() % 2 == 0) {
            for (int k = 0; k < 8; ++k) {
                const std::int32_t t = allowed[rng() % allowed.size()];
                if (vocab->bytes(t).size() > vocab->bytes(pick).size()) pick = t;
            }
        }
        REQUIRE(m.accept(pick));
        ref.take(vocab->bytes(pick));
    }
}

}  // namespace

TEST_CASE("Masks equal the brute-force reference over the Qwen3 vocabulary", "[grammar][qwen3]") {
    // Under the sanitizers each brute-force step costs several times more: shorter walks
    // (the Release suite walks them whole).
    const int scale = std::getenv("CALSERVE_SANITIZED") ? 8 : 1;
    const std::string nested = schema_ebnf(
        R"({"type":"object","properties":{"id":{"type":"integer"},"items":{"type":"array","items":{"type":"object",)"
        R"("properties":{"k":{"enum":["red","green","blue"]},"v":{"type":"number"}},"required":["k","v"]}},)"
        R"("note":{"type":["string","null"]},"ok":{"type":"boolean"}},"required":["id","items","note"]})");
    const std::string tree = schema_ebnf(
        R"({"$defs":{"node":{"type":"object","properties":{"name":{"type":"string","maxLength":12},"kids":{"type":"array",)"
        R"("items":{"$ref":"#/$defs/node"}}},"required":["name","kids"]}},"$ref":"#/$defs/node"})");
    const std::string tool = R"(root ::= "<tool_call>\n" call "\n</tool_call>"
call ::= "{\"name\":\"" [a-z_]+ "\",\"arguments\":" obj "}"
obj ::= "{" ( "\"" [a-z]+ "\":" ( [0-9]+ | "\"" [^"\\]* "\"" ) )? "}"
)";
    SECTION("nested objects and arrays") { check_against_reference(nested, 1, 25 / scale); }
    SECTION("recursion through $ref") { check_against_reference(tree, 2, 25 / scale); }
    SECTION("a tool-call wrapper") { check_against_reference(tool, 3, 20 / scale); }
    SECTION("any JSON object") { check_against_reference(gr::json_object_ebnf(), 4, 25 / scale); }
    SECTION("pattern and enums") {
        check_against_reference(schema_ebnf(R"({"anyOf":[{"type":"string","pattern":"^[a-f0-9]{4,8}$"},{"enum":[1,"two",[3]]}]})"), 5, 20 / scale);
    }
}

}  // namespace calserve::test
