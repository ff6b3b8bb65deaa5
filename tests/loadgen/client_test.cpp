// calserve bench's HTTP client and load runner against the real net/ server over a
// fake engine on loopback: model info, /tokenize, streamed records, closed and
// open loop runs, and clean errors from an unreachable server.
#include <catch2/catch.hpp>

#include "loadgen/run.hpp"
#include "tests/net/net_fixture.hpp"

using namespace calserve;
using namespace calserve::loadgen;

namespace {
endpoint local(std::uint16_t port) {
    auto ep = parse_url("http://127.0.0.1:" + std::to_string(port));
    REQUIRE(ep.ok());
    return *ep;
}
}  // namespace

TEST_CASE("bench URL parsing", "[bench]") {
    auto ep = parse_url("http://localhost:8000/api/");
    REQUIRE(ep.ok());
    CHECK(ep->host == "localhost");
    CHECK(ep->port == "8000");
    CHECK(ep->base == "/api");
    CHECK(parse_url("http://example")->port == "80");
    CHECK_FALSE(parse_url("https://x:1").ok());
    CHECK_FALSE(parse_url("http://x:port").ok());
}

TEST_CASE("bench client reads model info and tokenizes remotely", "[bench]") {
    test::server_fixture f;
    const auto ep = local(f.port);
    auto info = fetch_server_info(ep, std::chrono::seconds(5));
    REQUIRE(info.ok());
    CHECK(info->model == "fake-model");
    CHECK(info->max_model_len > 0);
    auto ids = tokenize_remote(ep, "abc", std::chrono::seconds(5));
    REQUIRE(ids.ok());
    CHECK(*ids == std::vector<std::int64_t>{'a', 'b', 'c'});
    auto corpus = corpus_tokens(remote_encoder(ep, std::chrono::seconds(5)), "hello ", 40);
    REQUIRE(corpus.ok());
    CHECK(corpus->size() >= 40);
}

TEST_CASE("bench streamed completion records every token on the client clock", "[bench]") {
    test::server_fixture f;
    f.engine.token_delay = std::chrono::microseconds(200);
    const auto origin = bench_clock::now();
    request_record r;
    stream_completion(local(f.port), stream_request{"fake-model", {'h', 'i'}, 5}, origin, r);
    INFO(r.error);
    REQUIRE(r.ok);
    CHECK(r.http_status == 200);
    CHECK(r.completion_tokens == 5);
    CHECK(r.token_times.size() == 5);
    CHECK(r.prompt_tokens == 2);
    CHECK(r.finish_reason == "length");
    CHECK_FALSE(r.request_id.empty());
    CHECK(r.t_send <= r.t_first_byte);
    CHECK(r.t_first_byte <= r.t_first_token);
    CHECK(r.t_first_token <= r.t_done);
    for (std::size_t i = 1; i < r.token_times.size(); ++i) CHECK(r.token_times[i] >= r.token_times[i - 1]);
    REQUIRE(f.engine.submitted().size() == 1);
    CHECK(f.engine.submitted()[0].prompt.size() == 2);
}

TEST_CASE("bench requests are greedy unless given a temperature, then seeded", "[bench]") {
    test::server_fixture f;
    const auto origin = bench_clock::now();
    request_record greedy;
    stream_completion(local(f.port), stream_request{"fake-model", {'h', 'i'}, 2}, origin, greedy);
    stream_request sampled{"fake-model", {'h', 'i'}, 2};
    sampled.temperature = 1.0;
    sampled.seed = 42;
    request_record drawn;
    stream_completion(local(f.port), sampled, origin, drawn);
    REQUIRE(greedy.ok);
    REQUIRE(drawn.ok);
    const auto got = f.engine.submitted();
    REQUIRE(got.size() == 2);
    CHECK(got[0].sampling.greedy());
    CHECK_FALSE(got[0].sampling.seed.has_value());
    CHECK(got[1].sampling.temperature == 1.0f);
    CHECK(got[1].sampling.seed == std::optional<std::uint64_t>{42});
}

TEST_CASE("bench runs closed and open loop and marks warm-up", "[bench]") {
    test::server_fixture f;
    const auto ep = local(f.port);
    const std::vector<std::vector<std::int64_t>> prompts{{'a', 'b'}, {'c', 'd'}};
    run_options opt;
    opt.model = "fake-model";
    opt.output_tokens = 3;
    opt.concurrency = 3;
    progress prog;
    auto recs = run_load(ep, "a", opt, prompts, 2, 6, bench_clock::now(), prog);
    REQUIRE(recs.size() == 8);
    CHECK(prog.done == 8);
    CHECK(prog.in_flight == 0);
    CHECK(recs[0].warmup);
    CHECK(recs[1].warmup);
    CHECK_FALSE(recs[2].warmup);
    for (const auto& r : recs) CHECK(r.ok);
    const auto s = summarize_run(recs, {}, 1);
    CHECK(s.measured == 6);
    CHECK(s.output_tokens == 18);

    opt.arrival = arrival_kind::constant;
    opt.rate = 200.0;
    progress prog2;
    auto open = run_load(ep, "a", opt, prompts, 0, 4, bench_clock::now(), prog2);
    REQUIRE(open.size() == 4);
    for (const auto& r : open) CHECK(r.ok);
    CHECK(open[3].t_send >= open[0].t_send);
}

TEST_CASE("bench reports an unreachable server and HTTP errors as values", "[bench]") {
    std::uint16_t dead_port = 0;
    {
        test::server_fixture f;
        dead_port = f.port;
    }
    const auto ep = local(dead_port);
    CHECK_FALSE(fetch_server_info(ep, std::chrono::seconds(2)).ok());
    request_record r;
    stream_completion(ep, stream_request{"m", {1}, 1}, bench_clock::now(), r);
    CHECK_FALSE(r.ok);
    CHECK_FALSE(r.error.empty());

    test::server_fixture f;
    f.engine.submit_failure = calserve::status::queue_full;
    request_record refused;
    stream_completion(local(f.port), stream_request{"fake-model", {1}, 1}, bench_clock::now(), refused);
    CHECK_FALSE(refused.ok);
    CHECK(refused.http_status == 429);
}
