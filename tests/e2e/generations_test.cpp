// End-to-end: several models on one board and release generations (docs/generations.md).
// Real daemons, real packages (the tiny preset packed with two seeds: other weights,
// other golden corpus), the `calserve ctl` client, greedy streams whose text must
// equal the solo run of the generation that served them.
#include <atomic>
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <fstream>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "io/trace.hpp"
#include "tests/e2e/daemon.hpp"
#include "tests/e2e/e2e_support.hpp"
#include "tests/net/net_fixture.hpp"
#include "tests/support/model_support.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;
using namespace calserve::test;
namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

const std::string k_preset = "tiny-dense-1chip";
// One tiny package (0.092 GiB with its KV region) + the 0.25 GiB guard fit a chip of this size; two do not.
const std::string k_one_per_chip = "device.sim.dram_bytes_per_chip=375809638";

const fs::path& gen1() { return test_package_dir(k_preset, 1); }
const fs::path& gen2() { return test_package_dir(k_preset, 2); }

std::string expected_text(std::uint16_t port, const fs::path& package, const std::vector<std::int32_t>& prompt, int n,
                          const std::string& model = "") {
    return reference_text(port, reference_greedy(package_model_dir(package), prompt, n), model);
}

std::vector<std::string> daemon_args(const fs::path& sock, std::vector<std::string> extra) {
    std::vector<std::string> a{"--set", "log.level=warn", "--control-socket", sock.string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
}

// The generation entry of `alias` that is current, from `model list` (empty: none).
json::object current_of(const fs::path& sock, const std::string& alias) {
    const auto list = ctl_result(sock, "model list");
    for (const auto& g : list.at("generations").as_array())
        if (g.at("alias").as_string() == alias && g.at("current").as_bool()) return g.as_object();
    return {};
}

// The current generation number of `alias`, -1 when none serves.
int current_number(const fs::path& sock, const std::string& alias) {
    auto g = current_of(sock, alias);
    return g.empty() ? -1 : g.at("generation").to_number<int>();
}

json::object generation_of(const fs::path& sock, const std::string& alias, std::int64_t number) {
    const auto list = ctl_result(sock, "model list");
    for (const auto& g : list.at("generations").as_array())
        if (g.at("alias").as_string() == alias && g.at("generation").to_number<std::int64_t>() == number)
            return g.as_object();
    FAIL("no generation " << number << " of " << alias);
    return {};
}

// A copy of `from` whose golden corpus is `corpus_of`'s: its weights differ from its corpus.
fs::path golden_mutant(const fs::path& from, const fs::path& corpus_of, const std::string& name) {
    auto dir = scratch_dir(name) / "pkg";
    fs::remove_all(dir);
    fs::copy(from, dir, fs::copy_options::recursive);
    fs::copy_file(package_model_dir(corpus_of) / "golden.jsonl", dir / "reference-model" / "golden.jsonl",
                  fs::copy_options::overwrite_existing);
    return dir;
}

// `clients` threads streaming the same prompts in a loop against a daemon serving
// generation 1 or 2 of one alias: each response is counted by the generation whose
// solo run it equals, or kept as a failure. The destructor stops and joins them, so
// a failed REQUIRE never leaves joinable threads behind.
struct streaming_clients {
    std::vector<std::vector<std::int32_t>> prompts;
    std::vector<std::string> text1, text2;  // each prompt's solo text on generation 1 / 2
    std::atomic<bool> stop{false};
    std::atomic<int> bad{0}, from1{0}, from2{0};
    std::vector<std::string> failures;
    std::mutex failures_mutex;
    std::vector<std::thread> threads;

    streaming_clients(int port, int clients, unsigned seed, int tokens) {
        for (int i = 0; i < clients; ++i) {
            prompts.push_back(random_prompt(seed + unsigned(i), 6));
            text1.push_back(expected_text(port, gen1(), prompts.back(), tokens));
            text2.push_back(expected_text(port, gen2(), prompts.back(), tokens));
            REQUIRE(text1.back() != text2.back());
        }
        for (int c = 0; c < clients; ++c)
            threads.emplace_back([this, port, c, tokens] {
                while (!stop.load()) {
                    auto got = sse_text(port, prompts[std::size_t(c)], tokens);
                    if (got == text1[std::size_t(c)]) ++from1;
                    else if (got == text2[std::size_t(c)]) ++from2;
                    else {
                        ++bad;
                        std::lock_guard lock(failures_mutex);
                        failures.push_back(got);
                    }
                }
            });
    }
    ~streaming_clients() { join(); }
    void join() {
        stop.store(true);
        for (auto& t : threads)
            if (t.joinable()) t.join();
    }
};

}  // namespace

TEST_CASE("models: two models on the two chips under concurrent load equal their solo runs", "[e2e][models]") {
    auto sock = socket_path("models-two");
    daemon_process d(daemon_args(sock, {"--package", "a=" + gen1().string(), "--package", "b=" + gen2().string(),
                                        "--set", k_one_per_chip, "--set", "models.b.chips=1"}));
    REQUIRE(d.started());

    auto models = json::parse(call(d.port(), http::verb::get, "/v1/models").body()).at("data").as_array();
    REQUIRE(models.size() == 2);
    CHECK(models.at(0).at("id").as_string() == "a");
    CHECK(models.at(1).at("id").as_string() == "b");
    CHECK(current_of(sock, "a").at("chips").as_array() == json::array{0});
    CHECK(current_of(sock, "b").at("chips").as_array() == json::array{1});

    // No model with several served: 400 naming them; an unknown one: 404.
    auto missing = post(d.port(), "/v1/completions", R"({"prompt":"hi","max_tokens":2})");
    CHECK(missing.result_int() == 400);
    CHECK(missing.body().find("a, b") != std::string::npos);
    CHECK(post(d.port(), "/v1/completions", R"({"model":"c","prompt":"hi","max_tokens":2})").result_int() == 404);

    const int n = 24;
    std::vector<std::future<std::pair<std::string, std::string>>> runs;
    for (int i = 0; i < 8; ++i) {
        const std::string model = i % 2 ? "b" : "a";
        runs.push_back(std::async(std::launch::async, [&, i, model] {
            auto prompt = random_prompt(100 + i, 5 + i);
            return std::make_pair(sse_text(d.port(), prompt, n, model),
                                  expected_text(d.port(), model == "a" ? gen1() : gen2(), prompt, n, model));
        }));
    }
    for (auto& r : runs) {
        auto [got, want] = r.get();
        CHECK(got == want);
    }
    CHECK(metric(d.port(), "calserve_model_requests_total{model=\"a\"}") >= 4);
    CHECK(metric(d.port(), "calserve_model_requests_total{model=\"b\"}") >= 4);
    CHECK(d.stop() == 0);
}

TEST_CASE("models: a set that does not fit is refused at start-up with the per-chip plan", "[e2e][models]") {
    const std::string p = gen1().string();
    auto [out, rc] = run_calserve("serve --port 0 --set log.level=warn --set " + k_one_per_chip + " --package a=" + p +
                                  " --package b=" + p + " --package c=" + p);
    CHECK(rc == 2);
    CHECK(out.find("do not fit") != std::string::npos);
    CHECK(out.find("chip 0:") != std::string::npos);
    CHECK(out.find("chip 1:") != std::string::npos);
    CHECK(out.find("c: needs 1 chip(s)") != std::string::npos);
}

TEST_CASE("generations: a switch under streaming load fails nothing, rollback is instant with --keep",
          "[e2e][generations]") {
    auto sock = socket_path("generations-switch");
    daemon_process d(daemon_args(sock, {"--package", "m=" + gen1().string(), "--set", "device.sim.step_ms=2"}));
    REQUIRE(d.started());
    const int n = 32;
    streaming_clients clients(d.port(), 4, 200, n);
    const auto& prompts = clients.prompts;
    const auto& text1 = clients.text1;
    const auto& text2 = clients.text2;
    REQUIRE(wait_until([&] { return clients.from1.load() >= 4; }, std::chrono::seconds(120)));
    auto [out, rc] = ctl(sock, "model load m " + gen2().string() + " --keep");
    CHECK(rc == 0);
    CHECK(current_number(sock, "m") == 2);
    const int before = clients.from2.load();
    REQUIRE(wait_until([&] { return clients.from2.load() >= before + 4; }, std::chrono::seconds(120)));
    clients.join();
    CHECK(clients.bad.load() == 0);
    for (const auto& f : clients.failures) UNSCOPED_INFO(f);
    // Every request after the switch went to generation 2.
    CHECK(sse_text(d.port(), prompts[0], n) == text2[0]);
    CHECK(metric(d.port(), "calserve_model_generation{model=\"m\"}") == 2);
    CHECK(metric(d.port(), "calserve_model_switches_total{model=\"m\"}") == 1);

    // The old generation drained and, kept, stays resident: rollback is instant.
    REQUIRE(wait_until([&] { return generation_of(sock, "m", 1).at("state").as_string() == "retired"; }));
    CHECK(generation_of(sock, "m", 1).at("resident").as_bool());
    auto rolled = ctl_result(sock, "model rollback m --no-wait");
    CHECK(rolled.at("generation").to_number<int>() == 1);
    CHECK(current_number(sock, "m") == 1);
    CHECK(sse_text(d.port(), prompts[1], n) == text1[1]);
    CHECK(d.stop() == 0);
}

TEST_CASE("generations: a load refused at each gate leaves the serving generation untouched", "[e2e][generations]") {
    auto sock = socket_path("generations-gates");
    daemon_process d(daemon_args(sock, {"--package", "m=" + gen1().string(), "--set", "device.sim.chips=1", "--set",
                                        k_one_per_chip}));
    REQUIRE(d.started());
    auto prompt = random_prompt(300, 7);
    const int n = 12;
    const auto want1 = expected_text(d.port(), gen1(), prompt, n);
    auto serving_untouched = [&] {
        CHECK(current_number(sock, "m") == 1);
        CHECK(sse_text(d.port(), prompt, n) == want1);
    };

    SECTION("plan: does not fit beside the serving generation; --replace drains it first") {
        auto [out, rc] = ctl(sock, "model load m " + gen2().string());
        CHECK(rc != 0);
        auto g = generation_of(sock, "m", 2);
        CHECK(g.at("state").as_string() == "failed");
        CHECK(std::string(g.at("reason").as_string()).find("does not fit") != std::string::npos);
        serving_untouched();
        auto [out2, rc2] = ctl(sock, "model load m " + gen2().string() + " --replace");
        CHECK(rc2 == 0);
        CHECK(current_number(sock, "m") == 3);
        CHECK(sse_text(d.port(), prompt, n) == expected_text(d.port(), gen2(), prompt, n));
        CHECK_FALSE(generation_of(sock, "m", 1).at("resident").as_bool());
    }
    SECTION("validation: a mutant package (truncated parameter block)") {
        auto dir = scratch_dir("generations-mutant") / "pkg";
        fs::remove_all(dir);
        fs::copy(gen2(), dir, fs::copy_options::recursive);
        fs::resize_file(dir / "param_blk0.bin", 100);
        auto [out, rc] = ctl(sock, "model load m " + dir.string() + " --replace");
        CHECK(rc != 0);
        CHECK(std::string(generation_of(sock, "m", 2).at("reason").as_string()).find("A_PARAM_BLOCK_SIZE") !=
              std::string::npos);
        serving_untouched();
    }
    SECTION("golden: weights that differ from the package's corpus") {
        auto dir = golden_mutant(gen1(), gen2(), "generations-golden");
        ctl_result(sock, "model unload m");  // room on the one chip; the alias answers 503 meanwhile
        CHECK(post(d.port(), "/v1/completions", R"({"model":"m","prompt":"hi","max_tokens":2})").result_int() == 503);
        REQUIRE(wait_until([&] { return !generation_of(sock, "m", 1).at("resident").as_bool(); }));
        auto [out, rc] = ctl(sock, "model load m " + dir.string());
        CHECK(rc != 0);
        CHECK(std::string(generation_of(sock, "m", 2).at("reason").as_string()).find("golden check") != std::string::npos);
        // Back to generation 1 (reloaded: it was unloaded).
        auto [out2, rc2] = ctl(sock, "model rollback m");
        CHECK(rc2 == 0);
        serving_untouched();
    }
    SECTION("device fault during warm-up") {
        // Four shots: generation 2's warm-up and its resets take them all (the device is declared
        // dead after 4 failed resets), so the generation the failed load brings back warms up on a
        // clean device whenever the `fault clear` below lands (`always` raced that restore).
        ctl_result(sock, "fault arm ccu_exception --mode count --count 4");
        auto [out, rc] = ctl(sock, "model load m " + gen2().string() + " --replace");
        CHECK(rc != 0);
        ctl_result(sock, "fault clear");
        CHECK(std::string(generation_of(sock, "m", 2).at("reason").as_string()).find("warm-up") != std::string::npos);
        // --replace drained generation 1 first; the failed load brought it back.
        REQUIRE(wait_until([&] { return current_number(sock, "m") == 1; }));
        REQUIRE(wait_until([&] { return call(d.port(), http::verb::get, "/ready").result_int() == 200; }));
        CHECK(sse_text(d.port(), prompt, n) == want1);
    }
    CHECK(d.stop() == 0);
}

TEST_CASE("generations: a restart serves the saved mapping, a corrupted state file is reported", "[e2e][generations]") {
    auto sock = socket_path("generations-restart");
    auto state = scratch_dir("generations-restart") / "state";
    fs::remove_all(state);
    const auto args = daemon_args(sock, {"--package", "m=" + gen1().string(), "--set", "server.state_dir=" + state.string()});
    auto prompt = random_prompt(400, 5);
    const int n = 10;
    std::string want1, want2;
    {
        daemon_process d(args);
        REQUIRE(d.started());
        want1 = expected_text(d.port(), gen1(), prompt, n);
        want2 = expected_text(d.port(), gen2(), prompt, n);
        auto [out, rc] = ctl(sock, "model load m " + gen2().string());
        REQUIRE(rc == 0);
        CHECK(d.stop() == 0);
    }
    REQUIRE(fs::exists(state / "models.json"));
    {
        daemon_process d(args);
        REQUIRE(d.started());
        CHECK(current_number(sock, "m") == 2);
        CHECK(sse_text(d.port(), prompt, n) == want2);
        // The previous generation is remembered: rollback reloads it.
        auto [out, rc] = ctl(sock, "model rollback m");
        CHECK(rc == 0);
        CHECK(sse_text(d.port(), prompt, n) == want1);
        CHECK(d.stop() == 0);
    }
    {
        // A flipped byte inside the mapping: the checksum catches it.
        std::string text;
        {
            std::ifstream in(state / "models.json");
            std::getline(in, text);
        }
        auto pos = text.find("generation");
        REQUIRE(pos != std::string::npos);
        text[pos] = 'G';
        std::ofstream(state / "models.json", std::ios::trunc) << text << "\n";
        daemon_process d(args);
        REQUIRE(d.started());
        auto list = ctl_result(sock, "model list");
        REQUIRE(list.contains("state_note"));
        CHECK(std::string(list.at("state_note").as_string()).find("unusable") != std::string::npos);
        CHECK(sse_text(d.port(), prompt, n) == want1);  // the command line's package
        CHECK(d.stop() == 0);
    }
}

// --- generations in a recordable daemon's trace (docs/trace.md) --------------------

namespace {

// The generation-op inputs of a trace, in order.
std::vector<io::trace_model> model_inputs(const io::trace_file& file) {
    std::vector<io::trace_model> out;
    for (const auto& in : file.inputs)
        if (auto* m = std::get_if<io::trace_model>(&in)) out.push_back(*m);
    return out;
}

// `calserve replay` of `trace` says identical, over every recorded message.
void check_replays_identically(const std::string& trace, const io::trace_file& file) {
    auto [out, rc] = run_calserve("replay " + trace);
    INFO(out);
    CHECK(rc == 0);
    CHECK_THAT(out, Catch::Contains("identical (" + std::to_string(file.messages.size()) + " messages"));
}

}  // namespace

TEST_CASE("recorded generations: a load and a rollback under streaming load replay identically",
          "[e2e][generations][trace]") {
    auto sock = socket_path("generations-traced");
    auto trace = (scratch_dir("generations-traced") / "run.jsonl").string();
    fs::remove(trace);
    daemon_process d(daemon_args(sock, {"--package", "m=" + gen1().string(), "--trace", trace, "--set",
                                        "device.sim.step_ms=2"}));
    REQUIRE(d.started());
    CHECK_THAT(d.banner(), Catch::Contains("recordable"));
    const int n = 24;
    streaming_clients clients(d.port(), 3, 500, n);
    const auto& prompts = clients.prompts;
    const auto& text1 = clients.text1;
    const auto& text2 = clients.text2;
    REQUIRE(wait_until([&] { return clients.from1.load() >= 3; }, std::chrono::seconds(120)));
    auto [loaded, load_rc] = ctl(sock, "model load m " + gen2().string() + " --keep");
    INFO(loaded);
    REQUIRE(load_rc == 0);
    CHECK(current_number(sock, "m") == 2);
    CHECK(sse_text(d.port(), prompts[0], n) == text2[0]);  // admitted after the switch: generation 2
    const int before = clients.from2.load();
    REQUIRE(wait_until([&] { return clients.from2.load() >= before + 3; }, std::chrono::seconds(120)));
    REQUIRE(wait_until([&] { return generation_of(sock, "m", 1).at("state").as_string() == "retired"; }));
    auto rolled = ctl_result(sock, "model rollback m");
    CHECK(rolled.at("generation").to_number<int>() == 1);
    CHECK(current_number(sock, "m") == 1);
    CHECK(sse_text(d.port(), prompts[1], n) == text1[1]);  // admitted after the rollback: generation 1
    const int after = clients.from1.load();
    REQUIRE(wait_until([&] { return clients.from1.load() >= after + 3; }, std::chrono::seconds(120)));
    clients.join();
    CHECK(clients.bad.load() == 0);
    for (const auto& f : clients.failures) UNSCOPED_INFO(f);
    auto stopped = ctl_result(sock, "trace stop");
    CHECK_THAT(std::string(stopped.at("written").as_string()), Catch::Contains("0 dropped"));
    CHECK(d.stop() == 0);

    auto file = io::read_trace(trace);
    REQUIRE(file.ok());
    CHECK(file->header.packages == std::vector<std::string>{"m=" + fs::absolute(gen1()).string()});
    auto ops = model_inputs(*file);
    REQUIRE(ops.size() == 2);
    CHECK(ops[0].op == "load");
    CHECK(ops[0].alias == "m");
    CHECK(ops[0].dir == fs::absolute(gen2()).string());
    CHECK(ops[0].keep);
    CHECK(ops[1].op == "rollback");
    CHECK(ops[0].t_ns < ops[1].t_ns);
    check_replays_identically(trace, *file);
}

TEST_CASE("recorded generations: failed loads are recorded and replay identically", "[e2e][generations][trace]") {
    auto sock = socket_path("generations-traced-fail");
    auto trace = (scratch_dir("generations-traced-fail") / "run.jsonl").string();
    fs::remove(trace);
    daemon_process d(daemon_args(sock, {"--package", "m=" + gen1().string(), "--trace", trace}));
    REQUIRE(d.started());
    auto prompt = random_prompt(600, 7);
    const int n = 12;
    const auto want1 = expected_text(d.port(), gen1(), prompt, n);
    CHECK(sse_text(d.port(), prompt, n) == want1);

    auto golden = golden_mutant(gen1(), gen2(), "generations-traced-golden");
    auto [out, rc] = ctl(sock, "model load m " + golden.string());
    CHECK(rc != 0);
    CHECK(std::string(generation_of(sock, "m", 2).at("reason").as_string()).find("golden check") != std::string::npos);
    auto mutant = scratch_dir("generations-traced-mutant") / "pkg";
    fs::remove_all(mutant);
    fs::copy(gen2(), mutant, fs::copy_options::recursive);
    fs::resize_file(mutant / "param_blk0.bin", 100);
    auto [out2, rc2] = ctl(sock, "model load m " + mutant.string());
    CHECK(rc2 != 0);
    CHECK(std::string(generation_of(sock, "m", 3).at("reason").as_string()).find("A_PARAM_BLOCK_SIZE") !=
          std::string::npos);
    // Refused before anything changed: not recorded.
    auto [out3, rc3] = ctl(sock, "model load m " + (scratch_dir("generations-traced-fail") / "none").string());
    CHECK(rc3 != 0);
    CHECK(current_number(sock, "m") == 1);
    CHECK(sse_text(d.port(), prompt, n) == want1);
    CHECK(d.stop() == 0);

    auto file = io::read_trace(trace);
    REQUIRE(file.ok());
    auto ops = model_inputs(*file);
    REQUIRE(ops.size() == 2);
    CHECK(ops[0].dir == fs::absolute(golden).string());
    CHECK(ops[1].dir == fs::absolute(mutant).string());
    check_replays_identically(trace, *file);

    // The packages must be where the daemon read them.
    fs::remove_all(golden);
    auto [missing, missing_rc] = run_calserve("replay " + trace);
    CHECK(missing_rc == 2);
    CHECK_THAT(missing, Catch::Contains(golden.string()));
    CHECK_THAT(missing, Catch::Contains("does not exist"));
}
