// Speculative decoding through the daemon (docs/speculative.md): two `calserve serve`
// processes on the same package, one drafting (runtime.speculative.method=ngram), one
// not, answer the same completions over real HTTP with the same text, greedy and
// seeded, streamed and not, concurrent; the drafting one verified drafts (its metrics);
// a stop string met inside an accepted run ends both answers alike; the console's state
// carries the acceptance; a drafting daemon's trace replays message for message.
#include <algorithm>
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <fstream>
#include <future>

#include "io/trace.hpp"

#include "tests/e2e/daemon.hpp"
#include "tests/e2e/e2e_support.hpp"
#include "tests/net/net_fixture.hpp"
#include "tests/support/model_support.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;
using namespace calserve::test;
namespace json = boost::json;

namespace {

// A prompt repeating a span of itself (n-gram lookup finds it), or a random one.
std::vector<std::int32_t> prompt_of(int i) {
    auto p = random_prompt(9100 + i, 5 + i % 4);
    if (i % 2 == 0) {
        const auto span = p;
        for (int r = 0; r < 3; ++r) p.insert(p.end(), span.begin(), span.end());
    }
    return p;
}

// Request i: greedy, or seeded sampling at temperature 1 (top-k 40) or 0.8 (top-p 0.9).
std::string body_of(int i, bool stream) {
    json::object o{{"model", "m"}, {"prompt", to_json(prompt_of(i))}, {"max_tokens", 96}, {"ignore_eos", true},
                   {"stream", stream}};
    switch (i % 3) {
        case 1: o["temperature"] = 1.0, o["top_k"] = 40, o["seed"] = 11 + i; break;
        case 2: o["temperature"] = 0.8, o["top_p"] = 0.9, o["seed"] = 23 + i; break;
        default: o["temperature"] = 0; break;
    }
    return json::serialize(o);
}

// The completion's text (streamed: the chunks' texts joined), or "HTTP n".
std::string text_of(std::uint16_t port, int i, bool stream) {
    auto res = post(port, "/v1/completions", body_of(i, stream));
    if (res.result_int() != 200) return "HTTP " + std::to_string(res.result_int()) + ": " + res.body();
    if (!stream) return std::string(json::parse(res.body()).at("choices").at(0).at("text").as_string());
    auto events = sse_events(res.body());
    if (!events || events->empty() || events->back() != "[DONE]") return "malformed stream";
    std::string text;
    for (std::size_t e = 0; e + 1 < events->size(); ++e) {
        const auto chunk = json::parse((*events)[e]);
        const auto& choices = chunk.at("choices").as_array();
        if (!choices.empty()) text += std::string(choices.at(0).at("text").as_string());
    }
    return text;
}

// `serve --model` on the tiny synthetic model (the cpu backend) with `--set` for each extra.
std::vector<std::string> cpu_args(std::vector<std::string> extra) {
    std::vector<std::string> args{"--model", tiny_model_dir().string(), "--served-model-name", "m", "--set",
                                  "log.level=warn"};
    for (auto& e : extra) args.insert(args.end(), {"--set", e});
    return args;
}

// Every request's text, eight at a time (verify rows and plain rows share batches).
std::vector<std::string> texts(std::uint16_t port, int n) {
    std::vector<std::future<std::string>> out;
    for (int i = 0; i < n; ++i) out.push_back(std::async(std::launch::async, [port, i] { return text_of(port, i, i % 2 == 1); }));
    std::vector<std::string> t;
    for (auto& f : out) t.push_back(f.get());
    return t;
}

// n requests to each daemon: the drafting one answers every text the plain one does, and none is an HTTP error.
void check_same_texts(std::uint16_t plain_port, std::uint16_t drafting_port, int n) {
    const auto want = texts(plain_port, n);
    const auto got = texts(drafting_port, n);
    for (int i = 0; i < n; ++i) {
        INFO("request " << i);
        CHECK(got[std::size_t(i)] == want[std::size_t(i)]);
        CHECK_FALSE(want[std::size_t(i)].starts_with("HTTP"));
    }
}
}  // namespace

TEST_CASE("serve with ngram drafting answers the text plain decoding answers", "[e2e][speculative]") {
    const std::vector<std::string> common{"device.sim.step_ms=0", "device.sim.d2h_ms=0", "runtime.max_batch=8"};
    auto drafting_cfg = common;
    drafting_cfg.push_back("runtime.speculative.method=ngram");
    drafting_cfg.push_back("runtime.speculative.max_batch=8");
    daemon_process plain(serve_args("tiny-dense-1chip", common));
    daemon_process drafting(serve_args("tiny-dense-1chip", drafting_cfg));
    REQUIRE(plain.started());
    REQUIRE(drafting.started());
    const int n = 8;
    check_same_texts(plain.port(), drafting.port(), n);
    CHECK(metric(drafting.port(), "calserve_spec_verify_rows_total") > 0);
    CHECK(metric(drafting.port(), "calserve_spec_drafted_tokens_total") > 0);
    CHECK(metric(plain.port(), "calserve_spec_verify_rows_total") == 0);
    REQUIRE(plain.stop() == 0);
    REQUIRE(drafting.stop() == 0);
}

// The cpu backend (serve --model): with drafting on it gets a sampling head
// (device.cpu_sampling_head -1, the default) and verifies drafts in its row-exact pass.
TEST_CASE("serve --model (cpu backend) with ngram drafting answers the text plain decoding answers",
          "[e2e][speculative][cpu]") {
    daemon_process plain(cpu_args({"runtime.max_batch=4"}));
    daemon_process drafting(cpu_args({"runtime.max_batch=4", "runtime.speculative.method=ngram"}));
    REQUIRE(plain.started());
    REQUIRE(drafting.started());
    const int n = 4;
    check_same_texts(plain.port(), drafting.port(), n);
    CHECK(metric(drafting.port(), "calserve_spec_verify_rows_total") > 0);
    CHECK(metric(drafting.port(), "calserve_spec_accepted_tokens_total") > 0);
    CHECK(metric(plain.port(), "calserve_spec_verify_rows_total") == 0);
    REQUIRE(plain.stop() == 0);
    REQUIRE(drafting.stop() == 0);
}

namespace {
// Request 0 (greedy, a repeating prompt) with `stop`; the answer's text and finish reason.
std::pair<std::string, std::string> stopped_at(std::uint16_t port, const std::string& stop) {
    auto body = json::parse(body_of(0, false)).as_object();
    body["stop"] = stop;
    auto res = post(port, "/v1/completions", json::serialize(body));
    if (res.result_int() != 200) return {"HTTP " + std::to_string(res.result_int()), ""};
    const auto answer = json::parse(res.body());
    const auto& choice = answer.at("choices").at(0);
    return {std::string(choice.at("text").as_string()), std::string(choice.at("finish_reason").as_string())};
}
}  // namespace

TEST_CASE("a stop string in a drafting daemon's answer ends it where plain decoding ends it; "
          "the console shows the acceptance",
          "[e2e][speculative]") {
    // The cpu backend (its tiny synthetic model accepts some drafts on this prompt; the
    // package's stand-in model none). Whether the stop falls inside an accepted run is
    // not visible over HTTP: the cut inside a run is tested in tests/actors
    // (speculative_test.cpp, job_codec_test.cpp).
    daemon_process plain(cpu_args({}));
    daemon_process drafting(cpu_args({"runtime.speculative.method=ngram"}));
    REQUIRE(plain.started());
    REQUIRE(drafting.started());
    // The whole answer, drafted and verified.
    const auto full = text_of(plain.port(), 0, false);
    REQUIRE(full == text_of(drafting.port(), 0, false));
    const double accepted_full = metric(drafting.port(), "calserve_spec_accepted_tokens_total");
    REQUIRE(accepted_full > 0);
    // A stop string from the answer's second third: its first occurrence ends at least a
    // third of the way in, after drafts were verified.
    REQUIRE(full.size() >= 9);
    const auto stop = full.substr(full.size() / 3, full.size() / 3);
    const auto want = stopped_at(plain.port(), stop);
    const auto got = stopped_at(drafting.port(), stop);
    INFO("stop \"" << stop << "\" in \"" << full << "\"");
    CHECK(want.second == "stop");
    CHECK(full.starts_with(want.first));
    CHECK(want.first.size() < full.size());
    CHECK(got == want);
    // The console's state: drafted and accepted tokens, and their ratio.
    const auto state = json::parse(call(drafting.port(), http::verb::get, "/v1/console/state").body());
    const auto& spec = state.at("speculative");
    const double drafted = spec.at("drafted_tokens").to_number<double>();
    const double kept = spec.at("accepted_tokens").to_number<double>();
    CHECK(drafted == metric(drafting.port(), "calserve_spec_drafted_tokens_total"));
    CHECK(kept == metric(drafting.port(), "calserve_spec_accepted_tokens_total"));
    CHECK(spec.at("verify_rows").to_number<double>() > 0);
    CHECK(spec.at("acceptance_rate").to_number<double>() == Approx(kept / drafted));
    const auto idle = json::parse(call(plain.port(), http::verb::get, "/v1/console/state").body());
    CHECK(idle.at("speculative").at("acceptance_rate").is_null());
    REQUIRE(plain.stop() == 0);
    REQUIRE(drafting.stop() == 0);
}

namespace {
// A copy of the trace at `from` whose header runs `key` with `value` instead.
std::string with_header_key(const std::string& from, const std::string& key, const std::string& value) {
    std::ifstream in(from);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    const auto set = "\"" + key + "=";
    const auto at = lines.at(0).find(set);
    if (at == std::string::npos) return {};
    const auto end = lines[0].find('"', at + set.size());
    lines[0].replace(at + set.size(), end - at - set.size(), value);
    const auto to = (scratch_dir("spec-trace") / ("with-" + value + ".jsonl")).string();
    std::ofstream out(to);
    for (auto& l : lines) out << l << "\n";
    return to;
}
}  // namespace

// A recordable daemon that drafts (serve --trace): the replay must rebuild its verify
// jobs (drafts from the drafter, acceptance fed back to the policy, kv_keep of the
// rejected positions) message for message. The same trace replayed without drafting
// diverges, so the identical replay is the drafting one.
TEST_CASE("serve --trace with ngram drafting records a run that replays identically", "[e2e][speculative][trace]") {
    const auto trace = (scratch_dir("spec-trace") / "drafting.jsonl").string();
    auto args = serve_args("tiny-dense-1chip", {"device.sim.step_ms=1", "device.sim.d2h_ms=0", "runtime.max_batch=8",
                                                "runtime.speculative.method=ngram", "runtime.speculative.max_batch=8"});
    args.insert(args.end(), {"--trace", trace});
    daemon_process d(args);
    REQUIRE(d.started());
    CHECK_THAT(d.banner(), Catch::Contains("recordable"));
    const auto got = texts(d.port(), 8);
    for (const auto& t : got) CHECK_FALSE(t.starts_with("HTTP"));
    const double rows = metric(d.port(), "calserve_spec_verify_rows_total");
    CHECK(rows > 0);
    REQUIRE(d.stop() == 0);

    auto file = io::read_trace(trace);
    REQUIRE(file.ok());
    REQUIRE(file->end.has_value());
    CHECK(file->end->dropped == 0);
    const auto& o = file->header.overrides;
    CHECK(std::find(o.begin(), o.end(), "runtime.speculative.method=ngram") != o.end());
    auto [out, rc] = run_calserve("replay " + trace);
    INFO(out);
    CHECK(rc == 0);
    CHECK_THAT(out, Catch::Contains("identical (" + std::to_string(file->messages.size()) + " messages"));

    const auto plain = with_header_key(trace, "runtime.speculative.method", "none");
    REQUIRE_FALSE(plain.empty());
    auto [bad, bad_rc] = run_calserve("replay " + plain);
    INFO(bad);
    CHECK(bad_rc == 1);
    CHECK_THAT(bad, Catch::Contains("diverged at sequence"));
}
