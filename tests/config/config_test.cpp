#include <catch2/catch.hpp>

#include <set>

#include "config/config.hpp"

using calserve::config;

TEST_CASE("defaults cover the whole schema and round-trip", "[config]") {
    auto c = config::defaults();
    REQUIRE(c.integer("runtime.max_inflight") == 2);
    REQUIRE(c.string("server.host") == "127.0.0.1");
    REQUIRE(c.number("device.sim.step_ms") == -1.0);
    auto again = config::defaults();
    REQUIRE(again.merge_json(c.to_json(), "printed").ok());
    REQUIRE(again.to_json() == c.to_json());
}

TEST_CASE("set overrides are typed and checked", "[config]") {
    auto c = config::defaults();
    REQUIRE(c.set("runtime.max_inflight=1").ok());
    REQUIRE(c.integer("runtime.max_inflight") == 1);
    REQUIRE(c.set("device.sim.step_ms=2.5").ok());
    REQUIRE(c.number("device.sim.step_ms") == 2.5);

    auto unknown = c.set("runtime.max_inflite=1");
    REQUIRE_FALSE(unknown.ok());
    REQUIRE_THAT(unknown.error().message, Catch::Contains("runtime.max_inflite"));
    REQUIRE_THAT(unknown.error().message, Catch::Contains("unknown"));

    auto range = c.set("runtime.max_inflight=3");
    REQUIRE_FALSE(range.ok());
    REQUIRE_THAT(range.error().message, Catch::Contains("runtime.max_inflight"));
    REQUIRE_THAT(range.error().message, Catch::Contains("[1, 2]"));

    auto type = c.set("server.port=eighty");
    REQUIRE_FALSE(type.ok());
    REQUIRE_THAT(type.error().message, Catch::Contains("server.port"));
    REQUIRE_THAT(type.error().message, Catch::Contains("integer"));

    auto choice = c.set("log.level=loud");
    REQUIRE_FALSE(choice.ok());
    REQUIRE_THAT(choice.error().message, Catch::Contains("one of trace|debug"));

    REQUIRE_FALSE(c.set("no-equals-sign").ok());
}

TEST_CASE("config files reject unknown keys, wrong types and bad ranges by path", "[config]") {
    auto c = config::defaults();
    auto unknown = c.merge_json(R"({"runtime": {"bogus": 1}})", "test.json");
    REQUIRE_FALSE(unknown.ok());
    REQUIRE_THAT(unknown.error().message, Catch::Contains("runtime.bogus"));

    auto section = c.merge_json(R"({"nosuch": {"x": 1}})", "test.json");
    REQUIRE_FALSE(section.ok());
    REQUIRE_THAT(section.error().message, Catch::Contains("nosuch"));

    auto type = c.merge_json(R"({"server": {"port": "80"}})", "test.json");
    REQUIRE_FALSE(type.ok());
    REQUIRE_THAT(type.error().message, Catch::Contains("server.port"));
    REQUIRE_THAT(type.error().message, Catch::Contains("got string"));

    auto range = c.merge_json(R"({"server": {"port": 70000}})", "test.json");
    REQUIRE_FALSE(range.ok());
    REQUIRE_THAT(range.error().message, Catch::Contains("[0, 65535]"));

    auto frac = c.merge_json(R"({"server": {"port": 80.5}})", "test.json");
    REQUIRE_FALSE(frac.ok());

    auto bad = c.merge_json("{not json", "test.json");
    REQUIRE_FALSE(bad.ok());
    REQUIRE_THAT(bad.error().message, Catch::Contains("not valid JSON"));

    REQUIRE(c.merge_json(R"({"server": {"port": 9000}, "device": {"sim": {"step_ms": 10}}})", "ok.json").ok());
    REQUIRE(c.integer("server.port") == 9000);
    REQUIRE(c.number("device.sim.step_ms") == 10.0);
}

TEST_CASE("load applies file then overrides in order", "[config]") {
    auto r = config::load(std::nullopt, {"server.port=1", "server.port=2"});
    REQUIRE(r.ok());
    REQUIRE(r->integer("server.port") == 2);
    auto missing = config::load(std::filesystem::path("/nonexistent/calserve.json"));
    REQUIRE_FALSE(missing.ok());
    REQUIRE_THAT(missing.error().message, Catch::Contains("/nonexistent/calserve.json"));
}

TEST_CASE("status table: names, classes, uniqueness", "[config]") {
    using namespace calserve;
    REQUIRE(to_string(status::wait_timeout) == "wait_timeout");
    REQUIRE(fault_class_of(status::wait_timeout) == fault_class::device);
    REQUIRE(fault_class_of(status::submit_busy) == fault_class::retryable);
    REQUIRE(fault_class_of(status::kv_full) == fault_class::capacity);
    REQUIRE(fault_class_of(status::bad_csr) == fault_class::request);
    REQUIRE(fault_class_of(status::package_invalid) == fault_class::model);
    std::set<int> numbers;
    for (auto s : all_statuses) REQUIRE(numbers.insert(int(s)).second);
    REQUIRE(numbers.size() >= 30);
}

TEST_CASE("pattern keys: models.NAME.chips for any name, absent by default", "[config]") {
    auto c = config::defaults();
    CHECK_FALSE(c.find_string("models.chat.chips").has_value());
    REQUIRE(c.set("models.chat.chips=1").ok());
    CHECK(c.find_string("models.chat.chips") == "1");
    REQUIRE(c.merge_json(R"({"models": {"code": {"chips": "0,1"}}})", "file").ok());
    CHECK(c.find_string("models.code.chips") == "0,1");
    CHECK_THAT(c.to_json(), Catch::Contains("\"chips\": \"0,1\""));
    auto again = config::defaults();
    REQUIRE(again.merge_json(c.to_json(), "printed").ok());
    CHECK(again.find_string("models.chat.chips") == "1");
    // The pattern matches one name segment and the exact leaf only.
    CHECK_FALSE(c.set("models.chips=1").ok());
    CHECK_FALSE(c.set("models.a.b.chips=1").ok());
    CHECK_FALSE(c.set("models.a.gpus=1").ok());
    CHECK_FALSE(c.merge_json(R"({"models": {"a": {"gpus": "1"}}})", "file").ok());
    CHECK_FALSE(c.merge_json(R"({"modelz": {"a": {"chips": "1"}}})", "file").ok());
}
