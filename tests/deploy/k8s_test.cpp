// deploy/k8s/ against the daemon's own facts: the ConfigMap's config passes
// `calserve config --check` and gives the port the container exposes and the
// probes ask; a daemon started with that config answers the probe paths 200, and
// its drain starts with the preStop command; the grace period covers preStop +
// server.drain_timeout_ms + the stop's last events; liveness outlasts a device
// recovery; the HPA's metric is one the daemon serves.
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <fstream>
#include <regex>
#include <yaml-cpp/yaml.h>

#include "tests/deploy/deploy_support.hpp"
#include "tests/e2e/daemon.hpp"
#include "tests/e2e/e2e_support.hpp"
#include "tests/net/net_fixture.hpp"
#include "tests/support/model_support.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve::test;

namespace {
// tools/cmd_serve.cpp: streams cut at the end of the drain get this long for their last events.
constexpr std::int64_t k_stop_grace_ms = 2000;
// A large package's configure + warm-up: the startup probe must wait at least this long.
constexpr std::int64_t k_warmup_allowance_s = 300;

YAML::Node load(const std::string& name) { return YAML::LoadFile(deploy_path("k8s/" + name).string()); }

// The daemon's own reading of the ConfigMap's config (`calserve config --check`).
boost::json::object checked_config() {
    auto [out, rc] = run_calserve("config --check " + deploy_path("k8s/config.json").string());
    INFO(out);
    REQUIRE(rc == 0);
    return boost::json::parse(out).as_object();
}

std::int64_t key(const boost::json::object& cfg, const char* section, const char* name) {
    return cfg.at(section).at(name).to_number<std::int64_t>();
}

YAML::Node container() {
    auto c = load("deployment.yaml")["spec"]["template"]["spec"]["containers"][0];
    REQUIRE(c.IsDefined());
    return c;
}

// A probe's port: a number, or the name of one of the container's ports.
int probe_port(const YAML::Node& probe, const YAML::Node& c) {
    auto port = probe["httpGet"]["port"];
    if (port.as<std::string>().find_first_not_of("0123456789") == std::string::npos) return port.as<int>();
    for (const auto& p : c["ports"])
        if (p["name"].as<std::string>() == port.as<std::string>()) return p["containerPort"].as<int>();
    return -1;
}

std::string pre_stop(const YAML::Node& c) {
    std::string out;
    for (const auto& a : c["lifecycle"]["preStop"]["exec"]["command"]) out += a.as<std::string>() + " ";
    return out;
}
}  // namespace

TEST_CASE("the kustomize base lists files that exist, and its ConfigMap is the config the daemon reads",
          "[deploy][k8s]") {
    auto k = load("kustomization.yaml");
    for (const auto& r : k["resources"]) CHECK(std::filesystem::exists(deploy_path("k8s/" + r.as<std::string>())));
    auto gen = k["configMapGenerator"][0];
    CHECK(gen["files"][0].as<std::string>() == "config.json");
    bool mounted = false;
    for (const auto& v : load("deployment.yaml")["spec"]["template"]["spec"]["volumes"])
        if (auto cm = v["configMap"]; cm.IsDefined())
            mounted = mounted || cm["name"].as<std::string>() == gen["name"].as<std::string>();
    CHECK(mounted);
    bool config_arg = false;
    for (const auto& a : container()["args"]) config_arg = config_arg || a.as<std::string>() == "--config=/etc/calserve/config.json";
    CHECK(config_arg);
    (void)checked_config();
}

TEST_CASE("ports, probe paths, grace period and liveness thresholds agree with the daemon", "[deploy][k8s]") {
    const auto cfg = checked_config();
    const auto c = container();
    const int port = int(key(cfg, "server", "port"));
    CHECK(c["ports"][0]["containerPort"].as<int>() == port);
    CHECK(cfg.at("server").at("host").as_string() == "0.0.0.0");   // reachable from the pod network
    for (const char* probe : {"startupProbe", "readinessProbe", "livenessProbe"}) {
        INFO(probe);
        CHECK(probe_port(c[probe], c) == port);
    }
    CHECK(c["readinessProbe"]["httpGet"]["path"].as<std::string>() == "/ready");
    CHECK(c["startupProbe"]["httpGet"]["path"].as<std::string>() == "/ready");
    CHECK(c["livenessProbe"]["httpGet"]["path"].as<std::string>() == "/health");
    auto service_target = load("service.yaml")["spec"]["ports"][0]["targetPort"].as<std::string>();
    CHECK(service_target == c["ports"][0]["name"].as<std::string>());

    // Grace: preStop (its sleep) + the drain + the stop's last events must fit before SIGKILL.
    const auto grace_s = load("deployment.yaml")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as<std::int64_t>();
    std::smatch m;
    const auto stop_cmd = pre_stop(c);
    REQUIRE(std::regex_search(stop_cmd, m, std::regex(R"(sleep (\d+))")));
    const std::int64_t pre_stop_ms = std::stoll(m[1]) * 1000;
    CHECK(grace_s * 1000 >= pre_stop_ms + key(cfg, "server", "drain_timeout_ms") + k_stop_grace_ms);
    // preStop drains through the control socket the config opens.
    const auto socket = std::string(cfg.at("server").at("control_socket").as_string());
    REQUIRE_FALSE(socket.empty());
    CHECK(stop_cmd.find("ctl --socket " + socket + " drain") != std::string::npos);

    // Liveness: a device recovery (reset_limit attempts, up to reset_backoff_max_ms apart)
    // and the progress watchdog's window pass before the kubelet restarts the container.
    const auto live = c["livenessProbe"];
    const auto live_window_ms = live["periodSeconds"].as<std::int64_t>() * live["failureThreshold"].as<std::int64_t>() * 1000;
    CHECK(live_window_ms >= key(cfg, "device", "reset_limit") * key(cfg, "device", "reset_backoff_max_ms"));
    CHECK(live_window_ms >= key(cfg, "runtime", "progress_timeout_ms"));
    const auto start = c["startupProbe"];
    CHECK(start["periodSeconds"].as<std::int64_t>() * start["failureThreshold"].as<std::int64_t>() >= k_warmup_allowance_s);
}

TEST_CASE("a daemon on the ConfigMap's config answers the probes and the preStop command drains it", "[deploy][k8s]") {
    // The config as shipped, but on loopback, a free port, a scratch control socket and a test package.
    const auto socket = socket_path("k8s-prestop");
    auto args = serve_args("tiny-dense-1chip", {"server.host=127.0.0.1", "server.control_socket=" + socket.string()});
    args.insert(args.begin(), "--config=" + deploy_path("k8s/config.json").string());
    daemon_process d(args);
    REQUIRE(d.started());
    const auto c = container();
    for (const char* probe : {"startupProbe", "readinessProbe", "livenessProbe"}) {
        INFO(probe);
        CHECK(call(d.port(), http::verb::get, c[probe]["httpGet"]["path"].as<std::string>()).result_int() == 200);
    }
    // The preStop command, pointed at this daemon's socket and without its sleep.
    const auto drain = std::regex_replace(pre_stop(c), std::regex(R"(.*calserve ctl --socket \S+ (\w+);.*)"), "$1");
    REQUIRE(drain == "drain");
    auto [out, rc] = ctl(socket, drain);
    INFO(out);
    CHECK(rc == 0);
    CHECK(call(d.port(), http::verb::get, "/ready").result_int() == 503);
    CHECK(call(d.port(), http::verb::get, "/health").result_int() == 200);   // draining is not dead
    CHECK(d.stop() == 0);
}

TEST_CASE("the HPA example scales on a metric the daemon serves", "[deploy][k8s]") {
    auto hpa = load("hpa.yaml");
    const auto name = hpa["spec"]["metrics"][0]["pods"]["metric"]["name"].as<std::string>();
    CHECK(name == "calserve_requests_waiting");
    CHECK(live_metric_families().count(name) == 1);
    auto adapter = load("prometheus-adapter.yaml");
    CHECK(adapter["rules"][0]["seriesQuery"].as<std::string>().find(name) != std::string::npos);
}
