// Actor runtime micro-benchmarks (actors/): message round trip between two actors
// in the deterministic and threaded runtimes, each next to its physical floor (a
// plain function call / one cache line bounced between two cores); KV plan/commit
// next to the std::map insert+erase it is built on; a scheduler tick over 64
// sequences next to the modelled device step it must stay far below.
#include <benchmark/benchmark.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <variant>
#include <vector>

#include "actors/runtime/actor.hpp"
#include "actors/kv_pool.hpp"
#include "actors/schedule_policy.hpp"

namespace {
using namespace calserve::actors;

struct ball {
    std::int64_t left = 0;
};
using ball_message = std::variant<ball>;

// Two of these bounce a ball until `left` reaches zero, then raise `done`.
class bouncer : public actor<bouncer, ball_message> {
public:
    bouncer(runtime& rt, std::string name, std::atomic<bool>& done) : actor(rt, std::move(name)), done_(done) {}
    void on_message(ball_message& m) {
        auto& b = std::get<ball>(m);
        if (b.left <= 0) {
            done_.store(true, std::memory_order_release);
            return;
        }
        peer.tell(ball{b.left - 1}, id());
    }
    address<bouncer> peer;

private:
    std::atomic<bool>& done_;
};

constexpr std::int64_t k_rally = 1000;  // hops per benchmark iteration (500 round trips)

struct rally {
    rally(runtime& rt) {
        a = spawn<bouncer>(rt, "a", done);
        b = spawn<bouncer>(rt, "b", done);
        a.lock()->peer = b;
        b.lock()->peer = a;
    }
    std::atomic<bool> done{false};
    address<bouncer> a;
    address<bouncer> b;
};

void BM_actor_round_trip_deterministic(benchmark::State& state) {
    runtime rt(run_mode::deterministic);
    rally r(rt);
    for (auto _ : state) {
        r.done = false;
        r.a.tell(ball{k_rally});
        rt.run_until_idle();
        if (!r.done) state.SkipWithError("rally did not finish");
    }
    state.SetItemsProcessed(state.iterations() * k_rally / 2);  // items = round trips
}
BENCHMARK(BM_actor_round_trip_deterministic);

void BM_actor_round_trip_threaded(benchmark::State& state) {
    runtime rt(run_mode::threaded, static_cast<std::size_t>(state.range(0)));
    rt.start();
    rally r(rt);
    for (auto _ : state) {
        r.done = false;
        r.a.tell(ball{k_rally});
        while (!r.done.load(std::memory_order_acquire)) std::this_thread::yield();
    }
    rt.stop();
    state.SetItemsProcessed(state.iterations() * k_rally / 2);
}
BENCHMARK(BM_actor_round_trip_threaded)->Arg(1)->Arg(2)->UseRealTime();

// Floor of the deterministic case: a round trip as two indirect calls.
void BM_floor_function_round_trip(benchmark::State& state) {
    std::function<void(std::int64_t)> fa, fb;
    std::int64_t sink = 0;
    fa = [&](std::int64_t n) { n > 0 ? fb(n - 1) : void(sink += n); };
    fb = [&](std::int64_t n) { n > 0 ? fa(n - 1) : void(sink += n); };
    for (auto _ : state) {
        for (std::int64_t i = 0; i < k_rally / 2; ++i) fa(1);
        benchmark::DoNotOptimize(sink);
    }
    state.SetItemsProcessed(state.iterations() * k_rally / 2);
}
BENCHMARK(BM_floor_function_round_trip);

// Floor of the threaded case: one cache line bounced between two spinning threads
// (what any cross-core message must pay at least twice per round trip).
void BM_floor_cache_line_round_trip(benchmark::State& state) {
    alignas(64) std::atomic<std::int64_t> turn{0};
    std::atomic<bool> stop{false};
    std::thread echo([&] {
        std::int64_t seen = 0;
        for (int spins = 0; !stop.load(std::memory_order_relaxed); ++spins) {
            const auto v = turn.load(std::memory_order_acquire);
            if (v != seen && (v & 1) == 1) {
                turn.store(v + 1, std::memory_order_release);
                seen = v + 1;
                spins = 0;
            } else if (spins % 256 == 255) {
                std::this_thread::yield();
            }
        }
    });
    std::int64_t v = 0;
    for (auto _ : state) {
        for (std::int64_t i = 0; i < k_rally / 2; ++i) {
            turn.store(++v, std::memory_order_release);
            // Spin, yielding now and then: on a loaded machine the echo thread may
            // not be running, and a pure spin would burn its time slice.
            for (int spins = 0; turn.load(std::memory_order_acquire) != v + 1; ++spins)
                if (spins % 256 == 255) std::this_thread::yield();
            ++v;
        }
    }
    stop = true;
    echo.join();
    state.SetItemsProcessed(state.iterations() * k_rally / 2);
}
BENCHMARK(BM_floor_cache_line_round_trip)->UseRealTime();

// KV admission as the KvManager does it: plan, commit, then release on finish.
void BM_kv_plan_commit_release(benchmark::State& state) {
    kv_pool pool(4096, 16);
    const auto resident = static_cast<sequence_id>(state.range(0));
    for (sequence_id s = 0; s < resident; ++s) {
        auto plan = pool.try_reserve(s + (1ULL << 40), 64);  // far from the loop's ids
        if (plan) (void)pool.commit(*plan);
    }
    sequence_id seq = 0;
    for (auto _ : state) {
        auto plan = pool.try_reserve(++seq, 300);
        if (!plan || !pool.commit(*plan)) state.SkipWithError("no room");
        benchmark::DoNotOptimize(pool.free_blocks());
        pool.release(seq);
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_kv_plan_commit_release)->Arg(0)->Arg(64);

// Floor: the ordered-map insert + erase a reservation needs.
void BM_floor_map_insert_erase(benchmark::State& state) {
    std::map<std::uint64_t, std::pair<std::int64_t, std::int64_t>> m;
    for (std::uint64_t s = 0; s < static_cast<std::uint64_t>(state.range(0)); ++s) m[s + (1ULL << 40)] = {4, 0};
    std::uint64_t seq = 0;
    for (auto _ : state) {
        m.emplace(++seq, std::pair<std::int64_t, std::int64_t>{19, 0});
        benchmark::DoNotOptimize(m.size());
        m.erase(seq);
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_floor_map_insert_erase)->Arg(0)->Arg(64);

// One BatchTick decision over 64 sequences (half decoding, some prefills waiting), batches up to 16.
void BM_scheduler_tick_64(benchmark::State& state) {
    std::vector<seq_view> seqs(64);
    for (std::size_t i = 0; i < seqs.size(); ++i) {
        seqs[i].seq = i;
        seqs[i].needs_prefill = i % 8 == 0;
        seqs[i].ready = i % 2 == 0;
        seqs[i].arrived = std::chrono::microseconds(i * 10);
        seqs[i].last_served = std::chrono::microseconds((i * 37) % 64);
    }
    tick_state ts;
    schedule_params params;
    params.max_batch = 16;
    nanoseconds now{std::chrono::milliseconds(5)};
    for (auto _ : state) {
        auto choice = plan_next_job(seqs, ts, params, now);
        if (choice) {
            ts = after_job(ts, *choice);
            for (auto row : choice->rows) seqs[row].last_served = now;
        }
        now += std::chrono::microseconds(1);
        benchmark::DoNotOptimize(choice);
    }
    // Reference: the simulator's default step is milliseconds, so a tick of
    // under a microsecond is < 0.1% of device time.
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_scheduler_tick_64);

}  // namespace
