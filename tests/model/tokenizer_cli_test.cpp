// `calserve tokenize` / `calserve detokenize`: JSON lines in, JSON lines out,
// agreement with the library, the CALSERVE_TOKENIZER_DIR fallback and exit codes
// (the rest of the data lookup: tests/tools/data_paths_test.cpp).
#include <catch2/catch.hpp>

#include <boost/json.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

#include "tests/model/tokenizer_fixture.hpp"

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

struct run_result {
    int exit_code = -1;
    std::string out;
    std::string err;
};

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Runs `env calserve args < input` in (and from) a scratch directory.
run_result run_cli(const std::string& env, const std::string& args, const std::string& input) {
    fs::path dir = calserve::test::scratch_dir("tokenizer-cli");
    std::ofstream(dir / "in.txt", std::ios::binary) << input;
    std::string cmd = "cd '" + dir.string() + "' && env -u CALSERVE_TOKENIZER_DIR " + env + " '" + calserve::test::calserve_binary().string() + "' " +
                      args + " < '" + (dir / "in.txt").string() + "' > '" + (dir / "out.txt").string() + "' 2> '" +
                      (dir / "err.txt").string() + "'";
    int status = std::system(cmd.c_str());
    run_result r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_file(dir / "out.txt");
    r.err = read_file(dir / "err.txt");
    return r;
}

std::string tok_arg() { return "--tokenizer '" + calserve::test::tokenizer_dir().string() + "'"; }

}  // namespace

TEST_CASE("calserve tokenize and detokenize round-trip JSON lines") {
    auto tok = calserve::test::qwen3_tokenizer();
    const std::vector<std::string> texts = {"Hello, world! <|im_start|>user\nhi<|im_end|>", "caf\xC3\xA9 \xF0\x9F\xA7\x8C",
                                            "", "  \r\n\t x"};
    std::string input;
    for (const auto& t : texts) input += json::serialize(json::string(t)) + "\n";
    run_result enc = run_cli("", "tokenize " + tok_arg(), input);
    REQUIRE(enc.exit_code == 0);
    std::istringstream lines(enc.out);
    std::string line;
    std::size_t i = 0;
    for (; std::getline(lines, line); ++i) {
        REQUIRE(i < texts.size());
        json::array got = json::parse(line).as_array();
        auto expected = calserve::test::encode_ok(*tok, texts[i]);
        REQUIRE(got.size() == expected.size());
        for (std::size_t k = 0; k < got.size(); ++k) CHECK(got[k].as_int64() == expected[k]);
    }
    CHECK(i == texts.size());

    run_result dec = run_cli("", "detokenize " + tok_arg(), enc.out);
    REQUIRE(dec.exit_code == 0);
    std::istringstream back(dec.out);
    for (i = 0; std::getline(back, line); ++i) CHECK(std::string(json::parse(line).as_string()) == texts.at(i));
    CHECK(i == texts.size());
}

TEST_CASE("calserve tokenize takes the directory from CALSERVE_TOKENIZER_DIR") {
    run_result r = run_cli("CALSERVE_TOKENIZER_DIR='" + calserve::test::tokenizer_dir().string() + "'", "tokenize",
                           "\"Hello\"\n");
    CHECK(r.exit_code == 0);
    CHECK(r.out == "[9707]\n");
    // Nothing in reach (no source tree, an empty data home): the message says how to fix it.
    const auto home = calserve::test::scratch_dir("tokenizer-cli-home");
    run_result none = run_cli("CALSERVE_NO_SOURCE_TREE=1 CALSERVE_HOME='" + home.string() + "'", "tokenize", "\"Hello\"\n");
    CHECK(none.exit_code == 2);
    CHECK_THAT(none.err, Catch::Contains("CALSERVE_TOKENIZER_DIR"));
}

TEST_CASE("calserve tokenize/detokenize stop at a malformed line with exit code 2") {
    run_result bad_json = run_cli("", "tokenize " + tok_arg(), "\"ok\"\nnot json\n");
    CHECK(bad_json.exit_code == 2);
    CHECK(bad_json.out == "[562]\n");
    CHECK_THAT(bad_json.err, Catch::Contains("line 2"));
    run_result bad_utf8 = run_cli("", "tokenize " + tok_arg(), "\"caf\xC3\"\n");
    CHECK(bad_utf8.exit_code == 2);
    CHECK_THAT(bad_utf8.err, Catch::Contains("line 1"));
    run_result bad_id = run_cli("", "detokenize " + tok_arg(), "[9707]\n[1, 151669]\n");
    CHECK(bad_id.exit_code == 2);
    CHECK_THAT(bad_id.err, Catch::Contains("line 2") && Catch::Contains("151669"));
    run_result not_array = run_cli("", "detokenize " + tok_arg(), "\"text\"\n");
    CHECK(not_array.exit_code == 2);
    run_result missing = run_cli("", "tokenize --tokenizer /nonexistent-dir", "\"x\"\n");
    CHECK(missing.exit_code == 2);
    CHECK_THAT(missing.err, Catch::Contains("nonexistent-dir"));
}
