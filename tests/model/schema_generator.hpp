#pragma once
// Seeded random JSON Schemas in the subset the grammar engine compiles (objects,
// arrays with item bounds, anyOf, string lengths and patterns, number bounds, enum,
// const, type unions, one recursive $defs shape). The root is always an object.
// Shared by the property tests of documents (tests/model) and tool-call arguments (tests/net).
#include <boost/json.hpp>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <random>
#include <string>

namespace calserve::test {

class schema_generator {
public:
    explicit schema_generator(std::uint64_t seed) : rng_(seed) {}

    boost::json::object schema() {
        namespace json = boost::json;
        json::object root = node(0).as_object();
        if (pick(4) == 0) {  // a recursive definition with a base case
            root = json::object{{"type", "object"},
                                {"properties", {{"name", leaf()}, {"kids", {{"type", "array"}, {"maxItems", 2},
                                                                           {"items", {{"$ref", "#/$defs/t"}}}}}}},
                                {"required", {"name", "kids"}}};
            json::object def = root;
            root["$defs"] = json::object{{"t", def}};
        }
        return root;
    }

private:
    using value = boost::json::value;
    std::size_t pick(std::size_t n) { return static_cast<std::size_t>(rng_() % n); }
    std::string word() {
        static const char* words[] = {"id", "name", "tags", "x", "value", "kind", "a b", "ünï", "q\"t", "n\\s"};
        return words[pick(std::size(words))];
    }

    value leaf() {
        switch (pick(12)) {
            case 0: return {{"type", "string"}};
            case 1: {
                const std::size_t lo = pick(3);
                return {{"type", "string"}, {"minLength", lo}, {"maxLength", lo + pick(5)}};
            }
            case 2: return {{"type", "string"}, {"pattern", pick(2) ? "^[a-z]{2,4}-\\d\\d?$" : "x+"}};
            case 3: return {{"type", "integer"}};
            case 4: return {{"type", "integer"}, {"minimum", static_cast<int>(pick(50)) - 25},
                            {"maximum", 30 + static_cast<int>(pick(200))}};
            case 5: return {{"type", "number"}};
            case 6: return {{"type", "boolean"}};
            case 7: return {{"type", "null"}};
            case 8: return {{"enum", {"red", "green", 3, nullptr, "é\"q"}}};
            case 9: return {{"const", "fixed"}};
            case 10: return {{"type", {"string", "null"}}};
            default: return {{"type", "integer"}, {"exclusiveMinimum", 0}};
        }
    }

    value node(int depth) {
        namespace json = boost::json;
        const std::size_t kind = depth >= 3 ? 3 : pick(4);
        if (kind == 0 || depth == 0) {
            json::object props;
            json::array required;
            const std::size_t n = 1 + pick(4);
            for (std::size_t i = 0; i < n; ++i) {
                const std::string key = word() + std::to_string(i);
                props[key] = node(depth + 1);
                if (pick(3) != 0) required.push_back(json::string(key));
            }
            return {{"type", "object"}, {"properties", props}, {"required", required}, {"additionalProperties", false}};
        }
        if (kind == 1) {
            json::object a{{"type", "array"}, {"items", node(depth + 1)}};
            if (pick(2)) a["minItems"] = pick(2);
            if (pick(2)) a["maxItems"] = 2 + pick(3);
            return a;
        }
        if (kind == 2) return {{"anyOf", {node(depth + 1), leaf()}}};
        return leaf();
    }

    std::mt19937_64 rng_;
};

}  // namespace calserve::test
