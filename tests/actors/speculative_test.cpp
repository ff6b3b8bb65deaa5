// Speculative decoding in the serving runtime (docs/speculative.md), on the deterministic
// runtime with the simulated NPU: with runtime.speculative.method=ngram the BatchTick
// drafts, the DeviceActor runs verify rows beside plain rows and the ChipSession streams
// each verify row's run, and every stream equals the same request decoded without
// drafting, token for token (greedy and seeded), also across stop ids and stop strings
// inside a run, max_tokens, cancellation, preemption and a device fault with verify
// jobs in flight; requests that do not draft (logprobs, penalties, grammar) are decoded
// as ever beside drafting rows (a grammar, presence and repetition penalties too).
#include <algorithm>

#include <catch2/catch.hpp>

#include "actors/batch_tick_actor.hpp"
#include "actors/kv_manager_actor.hpp"
#include "actors/runtime/lifecycle.hpp"
#include "device/fault_points.hpp"
#include "device/sim/sim_device.hpp"
#include "tests/actors/engine_fixture.hpp"

using namespace calserve;
using namespace calserve::actors;
using calserve::test::engine_harness;
using calserve::test::recording_sink;

namespace {

// Plain decoding: the head draws, nothing drafts (the reference for every stream here).
const std::vector<std::string> k_plain{"runtime.max_batch=16", "log.level=warn"};
// Drafting on every step the policy allows, up to 16 rows.
const std::vector<std::string> k_draft{"runtime.max_batch=16", "log.level=warn", "runtime.speculative.method=ngram",
                                       "runtime.speculative.max_batch=16"};

// A prompt that repeats a span of itself (what n-gram lookup rewards), or a random one.
std::vector<token_id> prompt_of(int i) {
    auto p = calserve::test::random_prompt(7300 + i, 4 + i % 5);
    if (i % 2 == 0) {
        const auto span = p;
        for (int r = 0; r < 3; ++r) p.insert(p.end(), span.begin(), span.end());
    }
    return p;
}

// Greedy and seeded rows (temperature with top-p, top-k, min-p).
generation_request request_of(engine_harness& h, int i, std::int64_t max_tokens) {
    auto r = h.greedy("q" + std::to_string(i), prompt_of(i), max_tokens);
    switch (i % 4) {
        case 1: r.sampling.temperature = 0.9f, r.sampling.top_p = 0.9f; break;
        case 2: r.sampling.temperature = 1.0f, r.sampling.top_k = 20; break;
        case 3: r.sampling.temperature = 0.7f, r.sampling.min_p = 0.05f; break;
        default: break;
    }
    if (i % 4 != 0) r.sampling.seed = 500 + std::uint64_t(i);
    return r;
}

struct run_result {
    std::vector<std::vector<token_id>> tokens;
    std::vector<std::string> text;
    std::vector<finish_reason> reasons;
};

// Runs `requests` together on a fresh package engine with `cfg`; every stream finished
// once, its KV returned, no device call about a sequence the device does not hold.
run_result run_all(const std::vector<std::string>& cfg, const std::vector<generation_request>& requests,
                   std::unique_ptr<engine_harness>& h) {
    h = std::make_unique<engine_harness>(calserve::test::on_package, cfg);
    std::vector<std::shared_ptr<recording_sink>> sinks;
    for (const auto& r : requests) {
        sinks.push_back(std::make_shared<recording_sink>());
        REQUIRE(h->engine->submit(r, sinks.back()).ok());
    }
    h->run_until_done();
    run_result out;
    for (auto& s : sinks) {
        REQUIRE(s->finishes == 1);
        out.tokens.push_back(s->tokens);
        out.text.push_back(s->text);
        out.reasons.push_back(s->result.reason);
    }
    CHECK(h->engine->kv_manager().pool().reserved_blocks() == 0);
    CHECK(h->engine->batch_tick().sequences() == 0);
    CHECK(h->rt.failures().empty());
    const auto* sim = dynamic_cast<const device::sim::sim_device*>(&h->engine->dev());
    REQUIRE(sim != nullptr);
    CHECK(sim->sequence_misuses().count == 0);
    return out;
}

std::vector<std::vector<token_id>> tokens_of(const std::vector<std::string>& cfg, const std::vector<generation_request>& requests,
                                             std::unique_ptr<engine_harness>& h) {
    return run_all(cfg, requests, h).tokens;
}

struct stream {
    generation_request request;
    std::shared_ptr<recording_sink> sink = std::make_shared<recording_sink>();
};

// Submits every request, then runs until `verify_rows` verify rows were formed.
std::vector<stream> submit_until_verifying(engine_harness& h, const std::vector<generation_request>& requests, double verify_rows) {
    std::vector<stream> streams;
    for (const auto& r : requests) {
        stream s;
        s.request = r;
        REQUIRE(h.engine->submit(s.request, s.sink).ok());
        streams.push_back(std::move(s));
    }
    for (int i = 0; i < 2000 && h.metrics.spec_verify_rows.value() < verify_rows; ++i)
        h.rt.run_for(std::chrono::microseconds(100));
    return streams;
}

}  // namespace

TEST_CASE("drafting gives the tokens of plain decoding, greedy and seeded, verify and plain rows in one batch",
          "[engine][speculative]") {
    engine_harness probe(calserve::test::on_package, k_draft);
    std::vector<generation_request> requests;
    for (int i = 0; i < 12; ++i) requests.push_back(request_of(probe, i, 24 + i % 7));
    std::unique_ptr<engine_harness> plain_h, draft_h;
    const auto plain = tokens_of(k_plain, requests, plain_h);
    const auto drafted = tokens_of(k_draft, requests, draft_h);
    for (std::size_t i = 0; i < requests.size(); ++i) {
        INFO(requests[i].id);
        CHECK(drafted[i] == plain[i]);
        CHECK(std::int64_t(drafted[i].size()) == requests[i].max_tokens);  // max_tokens, never past it mid-run
    }
    CHECK(plain_h->metrics.spec_verify_rows.value() == 0);
    CHECK(draft_h->metrics.spec_verify_rows.value() > 0);
    CHECK(draft_h->metrics.spec_accepted_tokens.value() > 0);  // runs of more than one token were streamed
    CHECK(draft_h->metrics.spec_acceptance_rate.value() > 0);
    // A step with drafts never costs an extra step.
    CHECK(draft_h->metrics.batch_size.count() <= plain_h->metrics.batch_size.count());
}

TEST_CASE("one drafting request alone: the same tokens in fewer device steps", "[engine][speculative]") {
    engine_harness probe(calserve::test::on_package, k_draft);
    double accepted = 0;
    for (int i : {0, 1, 2, 4}) {
        const std::vector<generation_request> one{request_of(probe, 40 + i, 200)};
        std::unique_ptr<engine_harness> plain_h, draft_h;
        const auto plain = tokens_of(k_plain, one, plain_h);
        CHECK(tokens_of(k_draft, one, draft_h) == plain);
        accepted += draft_h->metrics.spec_accepted_tokens.value();
        if (draft_h->metrics.spec_accepted_tokens.value() > 0)
            CHECK(draft_h->metrics.batch_size.count() < plain_h->metrics.batch_size.count());
    }
    CHECK(accepted > 0);
}

TEST_CASE("stop ids and stop strings inside a run end the stream where plain decoding ends it", "[engine][speculative]") {
    engine_harness probe(calserve::test::on_package, k_draft);
    std::vector<generation_request> requests;
    for (int i = 0; i < 10; ++i) requests.push_back(request_of(probe, 60 + i, 80));
    std::unique_ptr<engine_harness> h;
    const auto full = run_all(k_plain, requests, h);
    for (std::size_t i = 0; i < requests.size(); ++i) {
        if (i % 2 == 0) {
            requests[i].stop_token_ids = {full.tokens[i][40 + i % 9]};
        } else {
            // A stop string from the middle of the text (it may end inside a token).
            const auto& text = full.text[i];
            const auto at = std::min<std::size_t>(text.size() / 2, text.size() > 3 ? text.size() - 3 : 0);
            requests[i].stop = {text.substr(at, 2)};
        }
    }
    std::unique_ptr<engine_harness> plain_h, draft_h;
    const auto plain = run_all(k_plain, requests, plain_h);
    const auto drafted = run_all(k_draft, requests, draft_h);
    CHECK(draft_h->metrics.spec_verify_rows.value() > 0);  // (the cut inside a run: tests/actors/job_codec_test.cpp)
    for (std::size_t i = 0; i < requests.size(); ++i) {
        INFO(requests[i].id);
        CHECK(drafted.tokens[i] == plain.tokens[i]);
        CHECK(drafted.text[i] == plain.text[i]);
        CHECK(drafted.reasons[i] == plain.reasons[i]);
        CHECK(plain.reasons[i] == finish_reason::stop);
    }
}

TEST_CASE("cancelling drafting streams: prefixes of plain decoding, KV returned, nothing after the cancel",
          "[engine][speculative]") {
    engine_harness h(calserve::test::on_package, k_draft);
    std::vector<generation_request> requests;
    for (int i = 0; i < 10; ++i) requests.push_back(request_of(h, 80 + i, 40));
    std::unique_ptr<engine_harness> plain_h;
    const auto plain = tokens_of(k_plain, requests, plain_h);
    auto streams = submit_until_verifying(h, requests, 4);
    REQUIRE(h.metrics.spec_verify_rows.value() >= 4);
    std::vector<std::size_t> at_cancel(streams.size(), 0);
    for (std::size_t i = 0; i < streams.size(); i += 2) {
        at_cancel[i] = streams[i].sink->tokens.size();
        h.engine->cancel(streams[i].request.id);
        h.rt.run_for(std::chrono::microseconds(150));
    }
    h.run_until_done();
    for (std::size_t i = 0; i < streams.size(); ++i) {
        INFO(streams[i].request.id);
        REQUIRE(streams[i].sink->finishes == 1);
        const auto& got = streams[i].sink->tokens;
        REQUIRE(got.size() <= plain[i].size());
        CHECK(std::equal(got.begin(), got.end(), plain[i].begin()));
        if (i % 2 == 0) CHECK(got.size() == at_cancel[i]);
        else CHECK(got == plain[i]);
    }
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
    CHECK(h.engine->batch_tick().sequences() == 0);
    CHECK(h.rt.failures().empty());
}

TEST_CASE("preemption under a KV cap while drafting: all complete with the tokens of plain decoding", "[engine][speculative][kv]") {
    // Eight sequences of up to 90 tokens cannot all hold their KV.
    const auto cap = calserve::test::with_small_kv;
    engine_harness probe(calserve::test::on_package, k_draft);
    std::vector<generation_request> requests;
    for (int i = 0; i < 8; ++i) requests.push_back(request_of(probe, 100 + i, 48 + i));
    std::unique_ptr<engine_harness> plain_h, draft_h;
    const auto plain = tokens_of(cap(k_plain), requests, plain_h);
    CHECK(tokens_of(cap(k_draft), requests, draft_h) == plain);
    CHECK(draft_h->engine->batch_tick().preemptions() > 0);
    CHECK(draft_h->metrics.spec_verify_rows.value() > 0);
}

TEST_CASE("a device fault with verify jobs in flight: same streams, one reset, KV freed, no stale sequence",
          "[engine][speculative][faults]") {
    for (auto point : {device::fault_point::ccu_exception, device::fault_point::logits_nan}) {
        INFO(device::to_string(point));
        engine_harness h(calserve::test::on_package, k_draft);
        std::vector<generation_request> requests;
        for (int i = 0; i < 8; ++i) requests.push_back(request_of(h, 120 + i, 32));
        std::unique_ptr<engine_harness> plain_h;
        const auto plain = tokens_of(k_plain, requests, plain_h);
        auto streams = submit_until_verifying(h, requests, 3);
        REQUIRE(h.metrics.spec_verify_rows.value() >= 3);
        device::fault_spec f;
        f.point = point;
        REQUIRE(h.engine->faults()->arm(f).ok());
        h.run_until_done();
        CHECK(h.engine->device_resets() == 1);
        for (std::size_t i = 0; i < streams.size(); ++i) {
            INFO(requests[i].id);
            REQUIRE(streams[i].sink->finishes == 1);
            CHECK(streams[i].sink->tokens == plain[i]);
        }
        CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
        const auto* sim = dynamic_cast<const device::sim::sim_device*>(&h.engine->dev());
        REQUIRE(sim != nullptr);
        CHECK(sim->sequence_misuses().count == 0);
        CHECK(h.rt.failures().empty());
    }
}

TEST_CASE("requests that need the host's sampler (logprobs, penalties, logit bias) do not draft; same tokens beside drafting rows",
          "[engine][speculative]") {
    engine_harness probe(calserve::test::on_package, k_draft);
    std::vector<generation_request> requests;
    for (int i = 0; i < 8; ++i) {
        auto r = request_of(probe, 140 + i, i % 4 == 0 ? 200 : 20);
        if (i % 4 == 1) r.sampling.logprobs = true, r.sampling.top_logprobs = 2;
        if (i % 4 == 2) r.sampling.frequency_penalty = 0.4f;
        if (i % 4 == 3) r.sampling.logit_bias.emplace_back(r.prompt.front(), 2.0f);
        requests.push_back(std::move(r));
    }
    std::unique_ptr<engine_harness> plain_h, draft_h;
    const auto plain = tokens_of(k_plain, requests, plain_h);
    CHECK(tokens_of(k_draft, requests, draft_h) == plain);
    CHECK(draft_h->metrics.spec_verify_rows.value() > 0);  // the plain rows (i % 4 == 0) drafted
    // Only two of the eight may draft: far fewer verify rows than decode rows.
    CHECK(draft_h->metrics.spec_verify_rows.value() < draft_h->metrics.device_drawn_rows.value());
}

TEST_CASE("grammar-constrained requests and presence / repetition penalties do not draft; same tokens beside drafting rows",
          "[engine][speculative][constraint]") {
    // A finite JSON language: every constrained answer is complete within a few dozen tokens.
    const char* const schema = R"({"type": "object", "properties": {"ok": {"type": "boolean"},
        "n": {"type": "array", "items": {"enum": [1, 22, 333]}, "minItems": 2, "maxItems": 4}},
        "required": ["ok", "n"], "additionalProperties": false})";
    engine_harness probe(calserve::test::on_package, k_draft);
    std::vector<generation_request> requests;
    for (int i = 0; i < 8; ++i) {
        auto r = request_of(probe, 160 + i, i % 4 == 2 ? 40 : 200);
        if (i % 4 == 1 || i % 4 == 3) {  // greedy (i 1: temperature 0.9 dropped) and seeded at 0.7
            if (i % 4 == 1) r.sampling.temperature = 0, r.sampling.top_p = 1;
            r.constraint.kind = model::grammar::grammar_kind::json_schema;
            r.constraint.grammar = schema;  // compiled at submit, by each engine
        }
        if (i % 4 == 2) r.sampling.presence_penalty = 0.5f, r.sampling.repetition_penalty = 1.2f;
        requests.push_back(std::move(r));
    }
    std::unique_ptr<engine_harness> plain_h, draft_h;
    const auto plain = run_all(k_plain, requests, plain_h);
    const auto drafted = run_all(k_draft, requests, draft_h);
    for (std::size_t i = 0; i < requests.size(); ++i) {
        INFO(requests[i].id);
        CHECK(drafted.tokens[i] == plain.tokens[i]);
        CHECK(drafted.text[i] == plain.text[i]);
        CHECK(drafted.reasons[i] == plain.reasons[i]);
    }
    for (std::size_t i : {1, 3, 5, 7}) CHECK(plain.reasons[i] == finish_reason::stop);  // the grammar completed
    CHECK(draft_h->metrics.spec_verify_rows.value() > 0);  // the unconstrained rows (i % 4 == 0) drafted
    CHECK(draft_h->metrics.spec_verify_rows.value() < draft_h->metrics.device_drawn_rows.value());
}
