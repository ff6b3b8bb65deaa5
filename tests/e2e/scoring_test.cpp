// Scoring a prompt through a running daemon (docs/api.md "Scoring a prompt"): the
// request lm-evaluation-harness sends for a log-likelihood (`echo: true, logprobs: 1,
// max_tokens: 0` on /v1/completions) returns the prompt with every token's logprob, the
// first null, and no completion; and the alternatives scored at the prompt's last position
// are those a greedy generation from the prompt before it lists for its first token, with
// the same numbers in the JSON (the scoring prefill and decoding agree bit for bit).
#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include "tests/e2e/daemon.hpp"
#include "tests/e2e/e2e_support.hpp"
#include "tests/net/net_fixture.hpp"
#include "tests/support/model_support.hpp"

using namespace calserve;
using namespace calserve::test;

TEST_CASE("an lm-eval-harness loglikelihood request scores the prompt on a live daemon", "[e2e][scoring]") {
    daemon_process d(serve_args("tiny-dense-1chip", {"device.sim.step_ms=0", "device.sim.d2h_ms=0"}));
    REQUIRE(d.started());
    const auto prompt = random_prompt(911, 12);
    json::object score{{"prompt", to_json(prompt)}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 0},
                       {"temperature", 0}};
    auto res = post(d.port(), "/v1/completions", json::serialize(score));
    REQUIRE(res.result_int() == 200);
    const auto body = json::parse(res.body()).as_object();
    const auto& choice = body.at("choices").at(0).as_object();
    CHECK(choice.at("text").as_string() == reference_text(d.port(), prompt));
    CHECK(choice.at("finish_reason").as_string() == "length");
    CHECK(body.at("usage").at("completion_tokens").as_int64() == 0);
    CHECK(body.at("usage").at("prompt_tokens").as_int64() == std::int64_t(prompt.size()));
    const auto& lp = choice.at("logprobs").as_object();
    const auto& logprobs = lp.at("token_logprobs").as_array();
    const auto& tops = lp.at("top_logprobs").as_array();
    REQUIRE(logprobs.size() == prompt.size());
    REQUIRE(tops.size() == prompt.size());
    CHECK(logprobs.at(0).is_null());
    CHECK(tops.at(0).is_null());
    for (std::size_t i = 1; i < prompt.size(); ++i) {
        INFO("prompt token " << i);
        CHECK(logprobs.at(i).to_number<double>() <= 0.0);
        CHECK(tops.at(i).as_object().size() == 1);
    }
    // Greedy generation from the prompt's first 11 tokens: its first token's alternatives
    // are the ones scored at position 11, number for number.
    json::object gen{{"prompt", to_json(std::vector<std::int32_t>(prompt.begin(), prompt.end() - 1))}, {"logprobs", 1}, {"max_tokens", 1},
                     {"temperature", 0}};
    res = post(d.port(), "/v1/completions", json::serialize(gen));
    REQUIRE(res.result_int() == 200);
    const auto gen_top = json::parse(res.body()).at("choices").at(0).at("logprobs").at("top_logprobs").at(0);
    CHECK(gen_top == tops.back());
    CHECK(d.stop() == 0);
}
