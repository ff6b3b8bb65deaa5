// Speculative decoding through the daemon (docs/speculative.md): two `calserve serve`
// processes on the same package, one drafting (runtime.speculative.method=ngram), one
// not, answer the same completions over real HTTP with the same text, greedy and
// seeded, streamed and not, concurrent; the drafting one verified drafts (its metrics).
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <future>

#include "tests/e2e/daemon.hpp"
#include "tests/e2e/e2e_support.hpp"
#include "tests/net/net_fixture.hpp"
#include "tests/support/model_support.hpp"

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

// Every request's text, eight at a time (verify rows and plain rows share batches).
std::vector<std::string> texts(std::uint16_t port, int n) {
    std::vector<std::future<std::string>> out;
    for (int i = 0; i < n; ++i) out.push_back(std::async(std::launch::async, [port, i] { return text_of(port, i, i % 2 == 1); }));
    std::vector<std::string> t;
    for (auto& f : out) t.push_back(f.get());
    return t;
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
    const auto want = texts(plain.port(), n);
    const auto got = texts(drafting.port(), n);
    for (int i = 0; i < n; ++i) {
        INFO("request " << i);
        CHECK(got[std::size_t(i)] == want[std::size_t(i)]);
        CHECK_FALSE(want[std::size_t(i)].starts_with("HTTP"));
    }
    CHECK(metric(drafting.port(), "calserve_spec_verify_rows_total") > 0);
    CHECK(metric(drafting.port(), "calserve_spec_drafted_tokens_total") > 0);
    CHECK(metric(plain.port(), "calserve_spec_verify_rows_total") == 0);
    REQUIRE(plain.stop() == 0);
    REQUIRE(drafting.stop() == 0);
}
