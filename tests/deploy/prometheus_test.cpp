// deploy/prometheus/: the scrape configuration and the alerting rules are valid
// (promtool check), every rule is unit-tested (promtool test rules, and every
// alert of the rules file appears there firing), and every metric a rule reads is
// one a live daemon serves (a renamed family would silently blind an alert).
#include <catch2/catch.hpp>
#include <regex>
#include <set>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include "tests/deploy/deploy_support.hpp"

using namespace calserve::test;

namespace {
constexpr const char* k_promtool = "/usr/bin/promtool";   // Debian `prometheus`, installed by tools/bootstrap

std::string promtool(const std::string& args) {
    return std::string(k_promtool) + " " + args;
}
}  // namespace

TEST_CASE("promtool accepts the scrape configuration and the rules, and every rule's unit tests pass",
          "[deploy][prometheus]") {
    REQUIRE(::access(k_promtool, X_OK) == 0);
    const auto dir = deploy_path("prometheus").string();
    for (const std::string& args : {"check config " + dir + "/prometheus.yml", "check rules " + dir + "/calserve-rules.yml",
                                   "test rules " + dir + "/calserve-rules.test.yml"}) {
        auto [out, rc] = run_command("cd " + dir + " && " + promtool(args));
        INFO(args << "\n" << out);
        CHECK(rc == 0);
    }
}

TEST_CASE("every alert is tested firing, and every metric a rule reads is served by the daemon",
          "[deploy][prometheus]") {
    auto rules = YAML::LoadFile(deploy_path("prometheus/calserve-rules.yml").string());
    auto tests = YAML::LoadFile(deploy_path("prometheus/calserve-rules.test.yml").string());
    std::set<std::string> fired;   // alerts some test expects to fire
    for (const auto& t : tests["tests"])
        for (const auto& a : t["alert_rule_test"])
            if (a["exp_alerts"].size() > 0) fired.insert(a["alertname"].as<std::string>());

    const auto served = live_metric_families();
    const std::regex metric_name(R"(\b((calserve|process)_[a-z_]+)\b)");
    std::size_t alerts = 0;
    for (const auto& group : rules["groups"]) {
        for (const auto& rule : group["rules"]) {
            const auto name = rule["alert"].as<std::string>();
            ++alerts;
            INFO(name);
            CHECK(fired.count(name) == 1);
            CHECK(rule["labels"]["severity"].IsDefined());
            const auto expr = rule["expr"].as<std::string>();
            for (std::sregex_iterator it(expr.begin(), expr.end(), metric_name), end; it != end; ++it) {
                std::string family = (*it)[1];
                if (family.size() > 7 && family.ends_with("_bucket")) family.resize(family.size() - 7);
                INFO(family);
                CHECK(served.count(family) == 1);
            }
        }
    }
    CHECK(alerts >= 9);
}
