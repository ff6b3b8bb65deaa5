// Where the `calserve` subcommands find their data (tools/data_paths.hpp): every
// subcommand that needs the tokenizer finds it as `serve` does, a miss names every
// place looked, and an installed binary (`cmake --install`) runs with the source
// tree out of reach (CALSERVE_NO_SOURCE_TREE=1, the documented test hook).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "loadgen/client.hpp"
#include "tests/e2e/daemon.hpp"
#include "tests/support/test_paths.hpp"

namespace fs = std::filesystem;
using calserve::test::scratch_dir;

namespace {

struct run_result {
    int exit_code = -1;
    std::string out;
    std::string err;
};

std::string slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Runs `bin args < stdin_text` in `cwd` with `env` (NAME=VALUE words) and no
// inherited CALSERVE_TOKENIZER_DIR / CALSERVE_HOME.
run_result run_in(const fs::path& cwd, const std::string& env, const std::string& bin, const std::string& args,
                  const std::string& stdin_text = "") {
    std::ofstream(cwd / "stdin.txt") << stdin_text;
    const std::string cmd = "cd '" + cwd.string() + "' && env -u CALSERVE_TOKENIZER_DIR -u CALSERVE_HOME " + env +
                            " '" + bin + "' " + args + " < stdin.txt > stdout.txt 2> stderr.txt";
    const int st = std::system(cmd.c_str());
    return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, slurp(cwd / "stdout.txt"), slurp(cwd / "stderr.txt")};
}

std::string calserve_bin() { return calserve::test::calserve_binary().string(); }

}  // namespace

TEST_CASE("cli: pack --preset qwen3-30b-a3b-2chip without --tokenizer finds the tokenizer as serve does", "[tools]") {
    const auto dir = scratch_dir("lookup-pack");
    const auto r = run_in(dir, "CALSERVE_HOME=" + (dir / "home").string(), calserve_bin(),
                          "pack --preset qwen3-30b-a3b-2chip --out " + (dir / "pkg").string());
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Contains("packed qwen3-30b-a3b-2chip"));
    CHECK(fs::exists(dir / "pkg" / "calserve-manifest.json"));
}

TEST_CASE("cli: a missing tokenizer names every place looked, for every subcommand that needs it", "[tools]") {
    const auto dir = scratch_dir("lookup-miss");
    const auto env = "CALSERVE_NO_SOURCE_TREE=1 CALSERVE_HOME=" + (dir / "home").string() +
                     " CALSERVE_TOKENIZER_DIR=" + (dir / "nowhere").string();
    const std::vector<std::string> commands{
        "tokenize", "detokenize", "pack --preset tiny-dense-1chip --out " + (dir / "p").string(),
        "make-model --preset tiny-dense --out " + (dir / "m").string(), "serve --port 0"};
    for (const auto& cmd : commands) {
        const auto r = run_in(dir, env, calserve_bin(), cmd, "\"x\"\n");
        INFO(cmd << ": " << r.err);
        CHECK(r.exit_code == 2);
        CHECK_THAT(r.err, Catch::Contains((dir / "nowhere").string() + "  ($CALSERVE_TOKENIZER_DIR)"));
        CHECK_THAT(r.err, Catch::Contains("share/calserve/tokenizer-qwen3  (installed data"));
        CHECK_THAT(r.err, Catch::Contains((dir / "home" / "tokenizer-qwen3").string() + "  (data home)"));
        CHECK_THAT(r.err, Catch::Contains((dir / ".cache" / "tokenizer-qwen3").string() + "  (working directory)"));
        CHECK_THAT(r.err, !Catch::Contains("(source tree"));  // the hook took it off the list
    }
    // Without the hook the source tree is on the list too; --tokenizer names only itself.
    const auto listed = run_in(dir, "CALSERVE_HOME=" + (dir / "home").string(), calserve_bin(),
                               "tokenize --tokenizer " + (dir / "nowhere").string(), "\"x\"\n");
    CHECK(listed.exit_code == 2);
    CHECK_THAT(listed.err, Catch::Contains("no tokenizer.json in --tokenizer " + (dir / "nowhere").string()));
}

TEST_CASE("cli: tokenizer files in the data home are found", "[tools]") {
    const auto dir = scratch_dir("lookup-home");
    const auto tok = dir / "home" / "tokenizer-qwen3";
    fs::create_directories(tok);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
        fs::copy_file(calserve::test::tokenizer_dir() / f, tok / f);
    const auto r = run_in(dir, "CALSERVE_NO_SOURCE_TREE=1 CALSERVE_HOME=" + (dir / "home").string(), calserve_bin(),
                          "tokenize", "\"Hello\"\n");
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out == "[9707]\n");
}

TEST_CASE("cli: make-model copies the looked-up tokenizer, reference falls back to the lookup for text prompts",
          "[tools]") {
    const auto dir = scratch_dir("lookup-reference");
    const auto model = dir / "m";
    const auto made = run_in(dir, "CALSERVE_HOME=" + (dir / "home").string(), calserve_bin(),
                             "make-model --preset tiny-dense --out " + model.string());
    INFO(made.err);
    REQUIRE(made.exit_code == 0);
    CHECK(fs::exists(model / "tokenizer.json"));
    fs::remove(model / "tokenizer.json");
    fs::remove(model / "tokenizer_config.json");
    std::ofstream(dir / "p.jsonl") << "{\"id\":\"t\",\"text\":\"Hello world\"}\n";
    const auto ref = run_in(dir, "CALSERVE_HOME=" + (dir / "home").string(), calserve_bin(),
                            "reference --model " + model.string() + " --prompts p.jsonl --max-tokens 1 --output o.jsonl");
    INFO(ref.err);
    CHECK(ref.exit_code == 0);
    CHECK_THAT(slurp(dir / "o.jsonl"), Catch::Contains("\"prompt_ids\":[9707,1879]"));
}

TEST_CASE("install: cmake --install puts binary, tokenizer and docs under a prefix that runs without the tree",
          "[tools][install]") {
    const auto dir = scratch_dir("install");
    const auto prefix = dir / "prefix";
    const std::string install = std::string(CALSERVE_CMAKE_COMMAND) + " --install '" +
                                calserve::test::binary_dir().string() + "' --prefix '" + prefix.string() +
                                "' > '" + (dir / "install.log").string() + "' 2>&1";
    INFO(slurp(dir / "install.log"));
    REQUIRE(std::system(install.c_str()) == 0);
    const auto bin = prefix / "bin" / "calserve";
    REQUIRE(fs::exists(bin));
    CHECK(fs::exists(prefix / "share" / "calserve" / "tokenizer-qwen3" / "tokenizer.json"));
    CHECK(fs::exists(prefix / "share" / "doc" / "calserve" / "README.md"));
    CHECK(fs::exists(prefix / "share" / "doc" / "calserve" / "architecture.md"));

    const auto work = dir / "elsewhere";
    fs::create_directories(work);
    const auto home = "CALSERVE_NO_SOURCE_TREE=1 CALSERVE_HOME=" + (dir / "home").string();
    const auto tok = run_in(work, home, bin.string(), "tokenize", "\"Hello\"\n");
    INFO(tok.err);
    CHECK(tok.exit_code == 0);
    CHECK(tok.out == "[9707]\n");

    // serve: the default package is packed from the installed tokenizer, then served.
    const auto cwd = fs::current_path();
    fs::current_path(work);
    ::setenv("CALSERVE_BINARY", bin.c_str(), 1);
    ::setenv("CALSERVE_NO_SOURCE_TREE", "1", 1);
    ::setenv("CALSERVE_HOME", (dir / "home").c_str(), 1);
    ::unsetenv("CALSERVE_TOKENIZER_DIR");
    {
        calserve::test::daemon_process d({"--set", "log.level=warn"}, {.stderr_path = (dir / "serve.log").string()});
        INFO(slurp(dir / "serve.log"));
        REQUIRE(d.started());
        auto ep = calserve::loadgen::parse_url("http://127.0.0.1:" + std::to_string(d.port()));
        REQUIRE(ep.ok());
        auto models = calserve::loadgen::fetch_server_info(*ep, std::chrono::seconds(10));
        REQUIRE(models.ok());
        CHECK(models->model == "tiny-dense-1chip");
        CHECK(d.stop() == 0);
    }
    fs::current_path(cwd);
    CHECK(fs::exists(dir / "home" / "packages" / "tiny-dense-1chip"));
}
