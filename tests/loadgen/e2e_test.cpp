// End to end: `calserve serve` (default package, 1 ms simulated steps) as a child
// process, then `calserve bench` against it; checks the raw JSONL and summary files
// agree (counts, warm-up marks, ttft <= e2e, token counts) and that an unreachable
// server is a clean exit 2.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "loadgen/client.hpp"
#include "tests/support/test_paths.hpp"

namespace json = boost::json;

namespace {

// A daemon child: stdout is a pipe whose first line is the serving banner.
class serve_child {
public:
    explicit serve_child(const std::filesystem::path& home) {
        int fds[2];
        if (pipe(fds) != 0) return;
        const std::string bin = calserve::test::calserve_binary().string();
        const std::string tok = calserve::test::tokenizer_dir().string();
        pid_ = fork();
        if (pid_ == 0) {
            dup2(fds[1], STDOUT_FILENO);
            close(fds[0]);
            close(fds[1]);
            setenv("CALSERVE_HOME", home.c_str(), 1);
            setenv("CALSERVE_TOKENIZER_DIR", tok.c_str(), 1);
            execl(bin.c_str(), bin.c_str(), "serve", "--port", "0", "--set", "device.sim.step_ms=1",
                  static_cast<char*>(nullptr));
            _exit(127);
        }
        close(fds[1]);
        out_ = fds[0];
        read_banner();
    }
    ~serve_child() {
        if (pid_ > 0) {
            kill(pid_, SIGTERM);
            int st = 0;
            waitpid(pid_, &st, 0);
        }
        if (out_ >= 0) close(out_);
    }
    std::string url() const { return url_; }

private:
    void read_banner() {
        std::string line;
        char c = 0;
        while (read(out_, &c, 1) == 1 && c != '\n') line.push_back(c);
        const auto at = line.find("http://");
        if (at == std::string::npos) return;
        url_ = line.substr(at, line.find(' ', at) - at);
    }
    pid_t pid_ = -1;
    int out_ = -1;
    std::string url_;
};

bool wait_ready(const std::string& url) {
    auto ep = calserve::loadgen::parse_url(url);
    if (!ep) return false;
    for (int i = 0; i < 600; ++i) {
        auto r = calserve::loadgen::http_call(*ep, false, "/ready", "", std::chrono::seconds(2));
        if (r && r->status == 200) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
}

int run(const std::string& args) {
    const std::string cmd = calserve::test::calserve_binary().string() + " bench " + args + " >/dev/null 2>&1";
    const int st = std::system(cmd.c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string slurp(const std::filesystem::path& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

}  // namespace

TEST_CASE("bench e2e: a short closed-loop run against calserve serve", "[bench][e2e]") {
    const auto dir = calserve::test::scratch_dir("bench_e2e");
    serve_child daemon(dir / "home");
    REQUIRE_FALSE(daemon.url().empty());
    REQUIRE(wait_ready(daemon.url()));
    const auto out = dir / "out";
    REQUIRE(run("--url " + daemon.url() + " --requests 8 --warmup 2 --concurrency 2 --prompt-tokens 16 " +
                "--output-tokens 4 --seed 5 --out " + out.string()) == 0);

    std::ifstream jl(out / "requests.jsonl");
    std::string line;
    int measured = 0, warm = 0;
    std::int64_t tokens = 0;
    while (std::getline(jl, line)) {
        const auto r = json::parse(line).as_object();
        CHECK(r.at("ok").as_bool());
        CHECK(r.at("prompt_tokens").as_int64() == 16);
        CHECK(r.at("completion_tokens").as_int64() == 4);
        const double send = r.at("t_send").as_double();
        const double first = r.at("t_first_token").as_double();
        const double done = r.at("t_done").as_double();
        CHECK(send <= first);
        CHECK(first <= done);  // ttft <= e2e
        CHECK(r.at("token_times").as_array().size() >= 1);
        if (r.at("warmup").as_bool()) {
            ++warm;
        } else {
            ++measured;
            tokens += r.at("completion_tokens").as_int64();
        }
    }
    CHECK(warm == 2);
    CHECK(measured == 8);

    const auto sum = json::parse(slurp(out / "summary.json")).as_object().at("a").as_object();
    CHECK(sum.at("measured").as_int64() == 8);
    CHECK(sum.at("succeeded").as_int64() == 8);
    CHECK(sum.at("output_tokens").as_int64() == tokens);
    const auto& ttft = sum.at("ttft_ms").as_object();
    const auto& e2e = sum.at("e2e_ms").as_object();
    CHECK(ttft.at("count").as_int64() == 8);
    CHECK(ttft.at("mean").as_double() <= e2e.at("mean").as_double());
    CHECK(ttft.at("p50").as_double() <= ttft.at("p99").as_double());
    CHECK(sum.at("littles_law").as_object().at("ratio").as_double() > 0.0);
    CHECK(slurp(out / "summary.txt").find("TTFT") != std::string::npos);
}

TEST_CASE("bench e2e: an unreachable server is exit 2", "[bench][e2e]") {
    // Port 1 on loopback: nothing listens there for an unprivileged test.
    CHECK(run("--url http://127.0.0.1:1 --concurrency 1 --requests 1") == 2);
    CHECK(run("--url https://127.0.0.1:1 --concurrency 1") == 2);
    CHECK(run("--url http://127.0.0.1:1") == 2);  // neither --rate nor --concurrency
}
