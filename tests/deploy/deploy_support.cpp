#include "tests/deploy/deploy_support.hpp"

#include <catch2/catch.hpp>
#include <cstdio>
#include <sstream>
#include <sys/wait.h>

#include "tests/e2e/daemon.hpp"
#include "tests/e2e/e2e_support.hpp"
#include "tests/net/net_fixture.hpp"
#include "tests/support/model_support.hpp"
#include "tests/support/test_paths.hpp"

namespace calserve::test {

std::pair<std::string, int> run_command(const std::string& command) {
    std::FILE* p = ::popen((command + " 2>&1").c_str(), "r");
    if (!p) return {"", -1};
    std::string out;
    char buf[4096];
    while (auto n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    const int rc = ::pclose(p);
    return {out, WIFEXITED(rc) ? WEXITSTATUS(rc) : -1};
}

std::set<std::string> live_metric_families() {
    daemon_process d(serve_args("tiny-dense-1chip", {"device.sim.step_ms=0", "device.sim.d2h_ms=0"}));
    REQUIRE(d.started());
    REQUIRE(post(d.port(), "/v1/completions", completion_body(random_prompt(1, 4), 3, true)).result_int() == 200);
    auto page = call(d.port(), http::verb::get, "/metrics");
    REQUIRE(page.result_int() == 200);
    REQUIRE(d.stop() == 0);
    std::set<std::string> families;
    std::istringstream in(page.body());
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("# TYPE ", 0) != 0) continue;
        families.insert(line.substr(7, line.find(' ', 7) - 7));
    }
    return families;
}

std::filesystem::path deploy_path(const std::string& path) { return source_dir() / "deploy" / path; }

}  // namespace calserve::test
