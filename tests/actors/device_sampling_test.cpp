// Sampling on the device and token chaining (docs/device.md "Sampling head"), on the
// deterministic runtime with the simulated NPU: every stream drawn by the decode
// programs' sampling head, with steps chained on the device, equals host sampling of
// the same request token for token (greedy and seeded), also across stop ids,
// cancellation, preemption and a device fault with chained steps in flight; and rows
// with logprobs served from the head's top k equal host sampling bit for bit.
#include <algorithm>
#include <bit>
#include <mutex>

#include <catch2/catch.hpp>

#include "actors/batch_tick_actor.hpp"
#include "actors/kv_manager_actor.hpp"
#include "device/fault_points.hpp"
#include "tests/actors/engine_fixture.hpp"

using namespace calserve;
using namespace calserve::actors;
using calserve::test::engine_harness;
using calserve::test::recording_sink;

namespace {

// The host samples every row and nothing is chained: the reference for every stream here.
const std::vector<std::string> k_host{"runtime.max_batch=16", "log.level=warn", "device.sampling_head=false"};
// The defaults: the head draws, steps are chained.
const std::vector<std::string> k_device{"runtime.max_batch=16", "log.level=warn"};

struct stream {
    std::string id;
    generation_request request;
    std::shared_ptr<recording_sink> sink = std::make_shared<recording_sink>();
};

// A mix of greedy and seeded rows: temperature with top-p, top-k, min-p.
generation_request request_of(engine_harness& h, int i, std::int64_t max_tokens) {
    auto r = h.greedy("s" + std::to_string(i), calserve::test::random_prompt(4100 + i, 3 + i % 7), max_tokens);
    switch (i % 4) {
        case 1: r.sampling.temperature = 0.9f, r.sampling.top_p = 0.9f; break;
        case 2: r.sampling.temperature = 1.2f, r.sampling.top_k = 20; break;
        case 3: r.sampling.temperature = 0.7f, r.sampling.min_p = 0.05f; break;
        default: break;
    }
    if (i % 4 != 0) r.sampling.seed = 77 + std::uint64_t(i);
    return r;
}

// Runs `requests` together on a fresh package engine with `cfg`; the streams' tokens.
std::vector<std::vector<token_id>> run_all(const std::vector<std::string>& cfg, const std::vector<generation_request>& requests,
                                           engine_harness** keep = nullptr) {
    static std::unique_ptr<engine_harness> last;
    INFO("config: " << cfg.back());
    last = std::make_unique<engine_harness>(calserve::test::on_package, cfg);
    std::vector<std::shared_ptr<recording_sink>> sinks;
    for (const auto& r : requests) {
        sinks.push_back(std::make_shared<recording_sink>());
        REQUIRE(last->engine->submit(r, sinks.back()).ok());
    }
    last->run_until_done();
    std::vector<std::vector<token_id>> out;
    for (auto& s : sinks) {
        REQUIRE(s->finishes == 1);
        out.push_back(s->tokens);
    }
    CHECK(last->engine->kv_manager().pool().reserved_blocks() == 0);
    CHECK(last->engine->batch_tick().sequences() == 0);
    CHECK(last->rt.failures().empty());
    if (keep) *keep = last.get();
    return out;
}

}  // namespace

TEST_CASE("device-drawn, chained streams equal host sampling token for token", "[engine][sampling_head]") {
    engine_harness probe(calserve::test::on_package, k_device);
    std::vector<generation_request> requests;
    for (int i = 0; i < 12; ++i) requests.push_back(request_of(probe, i, 10 + i % 7));
    const auto host = run_all(k_host, requests);
    engine_harness* dev = nullptr;
    const auto device = run_all(k_device, requests, &dev);
    REQUIRE(dev != nullptr);
    CHECK(dev->metrics.device_drawn_rows.value() > 0);  // the head drew them
    CHECK(dev->metrics.chained_steps.value() > 0);      // and steps were chained
    for (std::size_t i = 0; i < requests.size(); ++i) {
        INFO(requests[i].id);
        CHECK(device[i] == host[i]);
        CHECK(std::int64_t(device[i].size()) == requests[i].max_tokens);
    }
    // The output copy carries a token and an RNG state per drawn row, not its logits (the
    // prefills still copy theirs).
    const double device_d2h = dev->metrics.d2h_bytes.value();
    engine_harness* host_engine = nullptr;
    run_all(k_host, requests, &host_engine);
    CHECK(device_d2h * 10 < host_engine->metrics.d2h_bytes.value());
    // The head alone (no chaining) draws the same tokens too.
    auto head_only = k_device;
    head_only.push_back("runtime.chain_tokens=false");
    engine_harness* unchained = nullptr;
    CHECK(run_all(head_only, requests, &unchained) == host);
    CHECK(unchained->metrics.chained_steps.value() == 0);
}

TEST_CASE("a chained stream ends exactly at its stop id; the step past it is never streamed", "[engine][sampling_head]") {
    engine_harness probe(calserve::test::on_package, k_device);
    std::vector<generation_request> requests;
    for (int i = 0; i < 8; ++i) requests.push_back(request_of(probe, 20 + i, 14));
    const auto full = run_all(k_host, requests);
    std::vector<std::vector<token_id>> want;
    for (std::size_t i = 0; i < requests.size(); ++i) {
        const auto stop = full[i][2 + i % 6];
        requests[i].stop_token_ids = {stop};
        want.emplace_back(full[i].begin(), std::find(full[i].begin(), full[i].end(), stop));
    }
    CHECK(run_all(k_device, requests) == want);
    CHECK(run_all(k_host, requests) == want);
}

TEST_CASE("cancelling chained streams: prefixes of host sampling, KV returned, nothing after the cancel", "[engine][sampling_head]") {
    std::vector<generation_request> requests;
    engine_harness h(calserve::test::on_package, k_device);
    for (int i = 0; i < 10; ++i) requests.push_back(request_of(h, 40 + i, 30));
    const auto host = run_all(k_host, requests);
    std::vector<stream> streams;
    for (auto& r : requests) {
        stream s;
        s.id = r.id;
        s.request = r;
        REQUIRE(h.engine->submit(s.request, s.sink).ok());
        streams.push_back(std::move(s));
    }
    std::vector<std::size_t> at_cancel(streams.size(), 0);
    for (int step = 0; step < 6; ++step) {
        h.rt.run_for(std::chrono::milliseconds(2));
        const auto i = std::size_t(step) * 2 % streams.size();
        at_cancel[i] = streams[i].sink->tokens.size();
        h.engine->cancel(streams[i].id);
    }
    h.run_until_done();
    CHECK(h.metrics.chained_steps.value() > 0);
    for (std::size_t i = 0; i < streams.size(); ++i) {
        INFO(streams[i].id);
        REQUIRE(streams[i].sink->finishes == 1);
        const auto& got = streams[i].sink->tokens;
        REQUIRE(got.size() <= host[i].size());
        CHECK(std::equal(got.begin(), got.end(), host[i].begin()));
        if (i % 2 == 0 && i < 12) CHECK(got.size() == at_cancel[i]);  // cancelled: no token streamed after it
    }
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
    CHECK(h.rt.failures().empty());
}

// Submits every request, then runs until the engine decodes in chained batches (3 chained steps).
std::vector<stream> submit_until_chained(engine_harness& h, const std::vector<generation_request>& requests) {
    std::vector<stream> streams;
    for (const auto& r : requests) {
        stream s;
        s.request = r;
        REQUIRE(h.engine->submit(s.request, s.sink).ok());
        streams.push_back(std::move(s));
    }
    for (int i = 0; i < 1000 && h.metrics.chained_steps.value() < 3; ++i) h.rt.run_for(std::chrono::microseconds(200));
    return streams;
}

// Every stream finished once, with the tokens host sampling gives its request.
void check_equal_to_host(const std::vector<stream>& streams, const std::vector<generation_request>& requests,
                         const std::vector<std::vector<token_id>>& host) {
    for (std::size_t i = 0; i < streams.size(); ++i) {
        INFO(requests[i].id);
        REQUIRE(streams[i].sink->finishes == 1);
        CHECK(streams[i].sink->tokens == host[i]);
    }
}

TEST_CASE("a device fault with chained steps in flight: same tokens as host sampling, one reset", "[engine][sampling_head][faults]") {
    std::vector<generation_request> requests;
    engine_harness h(calserve::test::on_package, k_device);
    for (int i = 0; i < 10; ++i) requests.push_back(request_of(h, 60 + i, 24));
    const auto host = run_all(k_host, requests);
    auto streams = submit_until_chained(h, requests);
    REQUIRE(h.metrics.chained_steps.value() >= 3);  // decoding in chained batches now
    device::fault_spec f;
    f.point = device::fault_point::ccu_exception;
    REQUIRE(h.engine->faults()->arm(f).ok());
    h.run_until_done();
    CHECK(h.engine->device_resets() == 1);
    check_equal_to_host(streams, requests, host);
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
    CHECK(h.rt.failures().empty());
}

TEST_CASE("NaN logits under the sampling head are a device fault, recovered with the same tokens", "[engine][sampling_head][faults]") {
    std::vector<generation_request> requests;
    engine_harness h(calserve::test::on_package, k_device);
    for (int i = 0; i < 6; ++i) requests.push_back(request_of(h, 80 + i, 16));
    const auto host = run_all(k_host, requests);
    auto streams = submit_until_chained(h, requests);
    device::fault_spec f;
    f.point = device::fault_point::logits_nan;
    REQUIRE(h.engine->faults()->arm(f).ok());
    h.run_until_done();
    CHECK(h.engine->device_resets() == 1);
    check_equal_to_host(streams, requests, host);
    CHECK(h.rt.failures().empty());
}

TEST_CASE("preemption under a KV cap with chaining: all complete, tokens equal host sampling", "[engine][sampling_head][kv]") {
    // Eight sequences of up to 70 tokens cannot all hold their KV.
    const auto cap = calserve::test::with_small_kv;
    engine_harness probe(calserve::test::on_package, k_device);
    std::vector<generation_request> requests;
    for (int i = 0; i < 8; ++i) requests.push_back(request_of(probe, 100 + i, 48 + i));
    const auto host = run_all(cap(k_host), requests);
    engine_harness* dev = nullptr;
    CHECK(run_all(cap(k_device), requests, &dev) == host);
    CHECK(dev->engine->batch_tick().preemptions() > 0);
    CHECK(dev->metrics.chained_steps.value() > 0);
}

TEST_CASE("rows that need their logits (logprobs, penalties) are sampled on the host beside device-drawn rows", "[engine][sampling_head]") {
    engine_harness probe(calserve::test::on_package, k_device);
    std::vector<generation_request> requests;
    for (int i = 0; i < 8; ++i) {
        auto r = request_of(probe, 120 + i, 12);
        if (i % 3 == 0) r.sampling.logprobs = true, r.sampling.top_logprobs = 3;
        if (i % 3 == 1) r.sampling.frequency_penalty = 0.5f;
        requests.push_back(std::move(r));
    }
    const auto host = run_all(k_host, requests);
    engine_harness* dev = nullptr;
    CHECK(run_all(k_device, requests, &dev) == host);
    CHECK(dev->metrics.device_drawn_rows.value() > 0);
}

// A step chained to a job whose submission is refused and retried later (submit_busy)
// finds no source on the device and goes back unrun; its rows must wait for that job
// instead of being chained to it again at the same instant without end (a livelock
// the runtime reports as a failure).
TEST_CASE("a chained step whose source is refused and retried waits for it: same tokens, no livelock",
          "[engine][sampling_head][faults]") {
    std::vector<generation_request> requests;
    engine_harness h(calserve::test::on_package, k_device);
    for (int i = 0; i < 6; ++i) requests.push_back(request_of(h, 90 + i, 20));
    const auto host = run_all(k_host, requests);
    auto streams = submit_until_chained(h, requests);
    REQUIRE(h.metrics.chained_steps.value() >= 3);
    device::fault_spec f;
    f.point = device::fault_point::submit_busy;
    f.mode = device::arm_mode::count;
    f.count = 4;
    REQUIRE(h.engine->faults()->arm(f).ok());
    h.run_until_done();
    INFO((h.rt.failures().empty() ? std::string() : h.rt.failures().front()));
    REQUIRE(h.rt.failures().empty());
    CHECK(h.engine->faults()->fires(device::fault_point::submit_busy) == 4);
    CHECK(h.engine->device_resets() == 0);
    check_equal_to_host(streams, requests, host);
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
}

namespace {

// Every token with its logprob and top_logprobs, as streamed.
struct logprob_sink : recording_sink {
    std::vector<generated_token> steps;
    void on_token(const generated_token& t) override {
        recording_sink::on_token(t);
        std::lock_guard lock(mutex);
        steps.push_back(t);
    }
};

std::vector<std::vector<generated_token>> run_logprobs(const std::vector<std::string>& cfg,
                                                       const std::vector<generation_request>& requests,
                                                       std::unique_ptr<engine_harness>& h) {
    h = std::make_unique<engine_harness>(calserve::test::on_package, cfg);
    std::vector<std::shared_ptr<logprob_sink>> sinks;
    for (const auto& r : requests) {
        sinks.push_back(std::make_shared<logprob_sink>());
        REQUIRE(h->engine->submit(r, sinks.back()).ok());
    }
    h->run_until_done();
    CHECK(h->rt.failures().empty());
    std::vector<std::vector<generated_token>> out;
    for (auto& s : sinks) {
        REQUIRE(s->finishes == 1);
        out.push_back(s->steps);
    }
    return out;
}

std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }

}  // namespace

TEST_CASE("logprobs rows served from the head's top k equal host sampling: tokens, logprobs, top_logprobs bit for bit",
          "[engine][sampling_head][top_k]") {
    engine_harness probe(calserve::test::on_package, k_device);
    // Kinds: 0 greedy + top_logprobs 5; 1 seeded top-k 20 + top_logprobs 3; 2 seeded top-k 40,
    // top-p, min-p, logprob only (all three: top-k mode, K = 64); 3 top-p without top-k +
    // logprobs (its logits); 4 no logprobs (drawn on the device).
    std::vector<generation_request> requests;
    std::vector<int> kind;
    for (int i = 0; i < 15; ++i) {
        auto r = probe.greedy("t" + std::to_string(i), calserve::test::random_prompt(5200 + i, 3 + i % 6), 9 + i % 5);
        r.sampling.seed = 300 + std::uint64_t(i);
        kind.push_back(i % 5);
        switch (i % 5) {
            case 0: r.sampling.logprobs = true, r.sampling.top_logprobs = 5; break;
            case 1: r.sampling.temperature = 0.8f, r.sampling.top_k = 20, r.sampling.logprobs = true, r.sampling.top_logprobs = 3; break;
            case 2:
                r.sampling.temperature = 1.3f, r.sampling.top_k = 40, r.sampling.top_p = 0.9f, r.sampling.min_p = 0.02f;
                r.sampling.logprobs = true;
                break;
            case 3: r.sampling.temperature = 0.9f, r.sampling.top_p = 0.9f, r.sampling.logprobs = true; break;
            default: r.sampling.temperature = 0.7f, r.sampling.top_k = 30; break;
        }
        requests.push_back(std::move(r));
    }
    std::unique_ptr<engine_harness> host_h, dev_h;
    const auto host = run_logprobs(k_host, requests, host_h);
    const auto dev = run_logprobs(k_device, requests, dev_h);
    double topk_rows = 0, drawn_rows = 0;
    for (std::size_t i = 0; i < requests.size(); ++i) {
        INFO(requests[i].id << " kind " << kind[i]);
        REQUIRE(dev[i].size() == host[i].size());
        CHECK(std::int64_t(dev[i].size()) == requests[i].max_tokens);
        for (std::size_t t = 0; t < host[i].size(); ++t) {
            INFO("token " << t);
            CHECK(dev[i][t].token == host[i][t].token);
            CHECK(bits_of(dev[i][t].logprob) == bits_of(host[i][t].logprob));
            REQUIRE(dev[i][t].top.size() == host[i][t].top.size());
            for (std::size_t j = 0; j < host[i][t].top.size(); ++j) {
                CHECK(dev[i][t].top[j].token == host[i][t].top[j].token);
                CHECK(bits_of(dev[i][t].top[j].logprob) == bits_of(host[i][t].top[j].logprob));
            }
        }
        CHECK(host[i].front().top.size() == std::size_t(requests[i].sampling.top_logprobs));
        // The first token comes from the prefill's logits; every later one from a decode row.
        const double decode_rows = double(host[i].size() - 1);
        if (kind[i] <= 2) topk_rows += decode_rows;
        if (kind[i] == 4) drawn_rows += decode_rows;
    }
    CHECK(topk_rows > 0);
    CHECK(dev_h->metrics.device_topk_rows.value() == topk_rows);
    CHECK(dev_h->metrics.device_drawn_rows.value() == drawn_rows);
    CHECK(host_h->metrics.device_topk_rows.value() == 0);
    // D2H: each top-k row copies K x 8 + 8 B (K = 64) instead of its logits, each drawn row 36 B.
    const double row = 2.0 * double(dev_h->engine->card().vocab_size);
    const double saved = host_h->metrics.d2h_bytes.value() - dev_h->metrics.d2h_bytes.value();
    CHECK(saved == topk_rows * (row - (64 * 8 + 8)) + drawn_rows * (row - 36));
}

// Every row greedy and drawn on the device: the sampler's greedy pass alone would take a
// +inf logit for the best token, so the head checks its rows like the host does (soak seed
// 618 on the package found this: a poisoned step streamed a wrong greedy token, no fault).
TEST_CASE("NaN logits in an all-greedy batch drawn on the device are a fault, not a token", "[engine][sampling_head][faults]") {
    std::vector<generation_request> requests;
    engine_harness h(calserve::test::on_package, k_device);
    for (int i = 0; i < 4; ++i) requests.push_back(request_of(h, 120 + 4 * i, 16));  // i % 4 == 0: greedy
    for (const auto& r : requests) REQUIRE(r.sampling.temperature == 0.0f);
    const auto host = run_all(k_host, requests);
    auto streams = submit_until_chained(h, requests);
    device::fault_spec f;
    f.point = device::fault_point::logits_nan;
    REQUIRE(h.engine->faults()->arm(f).ok());
    h.run_until_done();
    CHECK(h.engine->faults()->fires(device::fault_point::logits_nan) == 1);
    CHECK(h.engine->device_resets() == 1);
    check_equal_to_host(streams, requests, host);
    CHECK(h.rt.failures().empty());
}
