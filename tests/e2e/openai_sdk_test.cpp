// The official OpenAI Node SDK against a daemon on the default synthetic model
// (random weights): its structured-output helpers (chat.completions.parse and
// .stream with a json_schema response_format), forced tool calls (named and
// required, streamed deltas assembled by the SDK), reasoning with a budget, and a
// bad schema's 400. The checks are in tests/e2e/openai_sdk_client.js; node and the
// `openai` package are required (tools/bootstrap), their absence fails.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tests/e2e/daemon.hpp"
#include "tests/e2e/e2e_support.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve::test;

namespace {
std::string read_text(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Runs tests/e2e/<client> with node against a fresh daemon's /v1; every check it prints must pass.
void run_client(const std::string& client, const std::string& scratch) {
    daemon_process d(serve_args("tiny-dense-1chip", {}));
    REQUIRE(d.started());
    const auto dir = scratch_dir(scratch);
    const auto script = source_dir() / "tests" / "e2e" / client;
    const std::string cmd = "node '" + script.string() + "' http://127.0.0.1:" + std::to_string(d.port()) + "/v1 > '" +
                            (dir / "out.txt").string() + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    std::string out = read_text(dir / "out.txt");
    INFO(out);
    CHECK(rc == 0);
    CHECK(out.find("all checks passed") != std::string::npos);
    CHECK(d.stop() == 0);
}
}  // namespace

TEST_CASE("OpenAI Node SDK: structured outputs, tool calls and reasoning", "[e2e]") {
    run_client("openai_sdk_client.js", "openai-sdk");
}

// The same SDK on POST /v1/responses (tests/e2e/openai_responses_client.js).
TEST_CASE("OpenAI Node SDK: the Responses API, streaming and not", "[e2e]") {
    run_client("openai_responses_client.js", "openai-responses");
}
