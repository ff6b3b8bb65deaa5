// Streaming cost per token per stream in net/: formatting an SSE chunk, the
// engine-thread -> strand channel, and a whole SSE stream over loopback against
// a fake engine that emits tokens as fast as it can (so the figure is the
// server's per-token cost plus the client's parse, not model time).
#include <benchmark/benchmark.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "net/openai_format.hpp"
#include "net/stream_channel.hpp"
#include "tests/net/net_fixture.hpp"

namespace {
using namespace calserve;

void BM_sse_chunk_format(benchmark::State& state) {
    model::sampling_params sp;
    net::response_builder b(net::api_kind::chat, "chatcmpl-0123456789abcdef", "model", false, sp, nullptr);
    actors::generated_token t;
    t.token = 9707;
    t.text = " hello";
    for (auto _ : state) {
        std::string c = b.token_chunk(t);
        benchmark::DoNotOptimize(c);
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_sse_chunk_format);

void BM_channel_push_take(benchmark::State& state) {
    boost::asio::io_context ioc;
    auto ch = std::make_shared<net::stream_channel>(ioc.get_executor(), 1 << 20);
    net::channel_sink sink(ch, 0);
    actors::generated_token t;
    t.text = " hello";
    std::vector<net::stream_event> events;
    std::vector<std::uint64_t> over;
    const int batch = 64;
    for (auto _ : state) {
        for (int i = 0; i < batch; ++i) sink.on_token(t);
        events.clear();
        ch->take(events, over);
        benchmark::DoNotOptimize(events.data());
    }
    state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_channel_push_take);

// One SSE stream of `range(0)` tokens end to end over loopback; items = tokens.
void BM_sse_stream_loopback(benchmark::State& state) {
    calserve::net::server_options o;
    o.write_queue = 1 << 16;  // the fake engine bursts all tokens at once
    test::server_fixture f(o);
    const std::string body =
        R"({"prompt":"x","stream":true,"max_tokens":)" + std::to_string(state.range(0)) + "}";
    for (auto _ : state) {
        auto r = test::post(f.port, "/v1/completions", body);
        if (r.result_int() != 200 || r.body().find("queue_full") != std::string::npos ||
            r.body().find(R"("finish_reason":"length")") == std::string::npos) {
            state.SkipWithError("stream incomplete");
        }
        benchmark::DoNotOptimize(r.body().data());
    }
    state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_sse_stream_loopback)->Arg(2000)->Unit(benchmark::kMillisecond)->UseRealTime();
}  // namespace
