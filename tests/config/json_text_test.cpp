// The project's JSON writer: integers as integers, floats shortest round-trip
// without exponents in ordinary ranges, what Boost.JSON writes for the rest.
#include <catch2/catch.hpp>

#include <boost/json.hpp>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "config/json_text.hpp"

using calserve::json_text;
namespace json = boost::json;

TEST_CASE("json_text writes counts held as doubles as integers and floats in their shortest fixed form") {
    struct row {
        double value;
        const char* text;
    };
    const row table[] = {
        {256.0, "256"},                                   // a count that went through a double
        {0.0, "0"},
        {23.0, "23"},
        {-3.57, "-3.57"},
        {static_cast<double>(-3.7369470596313477f), "-3.7369470596313477"},  // a float logprob's exact bits
        {0.1, "0.1"},
        {0.00012, "0.00012"},
        {1e-5, "0.00001"},
        {123456789012345.0, "123456789012345"},
        {1e-7, "1e-07"},                                  // outside the ordinary range: exponent form
        {1e20, "1e+20"},
        {-0.0, "-0.0"},
    };
    for (const auto& r : table) {
        INFO(r.text);
        CHECK(json_text(json::value(r.value)) == r.text);
    }
}

TEST_CASE("json_text: every written double reads back to the same bits; NaN and infinity are null") {
    for (double d : {-3.7369470596313477, -3.736947059631348, 1.0 / 3.0, 2.5e-5, 9007199254740993.0, 1e300}) {
        const auto text = json_text(json::value(d));
        CHECK(text.find('E') == std::string::npos);
        CHECK(std::strtod(text.c_str(), nullptr) == d);
    }
    CHECK(json_text(json::value(std::numeric_limits<double>::quiet_NaN())) == "null");
    CHECK(json_text(json::value(-std::numeric_limits<double>::infinity())) == "null");
}

TEST_CASE("json_text writes structure, strings and integers as Boost.JSON does") {
    json::value v = json::parse(R"({"a":[1,-2,18446744073709551615,true,null,"x\"\n\u00e9"],"b":{},"c":[]})");
    CHECK(json_text(v) == json::serialize(v));
    json::object o{{"kv_blocks_total", 256.0}, {"lp", -3.57}, {"n", std::int64_t{7}}};
    CHECK(json_text(o) == R"({"kv_blocks_total":256,"lp":-3.57,"n":7})");
}
