// realtime_driver: a deterministic runtime run in real time on one thread, with
// work from other threads applied at the virtual time the driver has reached.
#include <catch2/catch.hpp>
#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "actors/runtime/realtime_driver.hpp"
#include "actors/runtime/runtime.hpp"

using namespace calserve;
using namespace calserve::actors;

namespace {
bool wait_until(const std::function<bool()>& pred) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!pred()) {
        if (std::chrono::steady_clock::now() > end) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}
}  // namespace

TEST_CASE("realtime_driver runs work from many threads on one thread, in order per sender", "[actors][driver]") {
    runtime rt(run_mode::deterministic);
    realtime_driver driver(rt);
    driver.start();
    constexpr int k_senders = 4, k_items = 2000;
    std::mutex mutex;
    std::map<int, std::vector<int>> seen;  // written on the driver thread only; read after stop
    std::set<std::thread::id> threads;
    std::vector<std::int64_t> times;
    std::vector<std::thread> senders;
    for (int s = 0; s < k_senders; ++s)
        senders.emplace_back([&, s] {
            for (int i = 0; i < k_items; ++i)
                driver.post([&, s, i] {
                    std::lock_guard lock(mutex);
                    seen[s].push_back(i);
                    threads.insert(std::this_thread::get_id());
                    times.push_back(rt.now().count());
                });
        });
    for (auto& t : senders) t.join();
    CHECK(driver.call([] { return 7; }) == 7);  // call waits: everything posted before it has run
    driver.stop();
    REQUIRE(seen.size() == std::size_t(k_senders));
    for (auto& [s, items] : seen) {
        REQUIRE(items.size() == std::size_t(k_items));
        for (int i = 0; i < k_items; ++i) CHECK(items[std::size_t(i)] == i);
    }
    CHECK(threads.size() == 1);
    CHECK_FALSE(threads.contains(std::this_thread::get_id()));
    CHECK(std::is_sorted(times.begin(), times.end()));  // virtual time never goes backwards
}

TEST_CASE("realtime_driver fires timers at exactly their virtual due time", "[actors][driver]") {
    runtime rt(run_mode::deterministic);
    realtime_driver driver(rt);
    driver.start();
    auto strand = rt.make_strand();
    std::atomic<std::int64_t> fired_at{-1};
    auto scheduled_at = driver.call([&] {
        rt.schedule_after(strand, std::chrono::milliseconds(5), [&] { fired_at = rt.now().count(); });
        return rt.now().count();
    });
    REQUIRE(wait_until([&] { return fired_at.load() >= 0; }));
    // However late the thread woke, the timer sees its own due time: what a replay sees too.
    CHECK(fired_at.load() == scheduled_at + 5'000'000);
    CHECK(driver.call([&] { return rt.now().count(); }) >= fired_at.load());
    driver.stop();
}

TEST_CASE("realtime_driver reports a throwing item and goes on, and runs work inline once stopped", "[actors][driver]") {
    runtime rt(run_mode::deterministic);
    realtime_driver driver(rt);
    driver.start();
    driver.post([] { throw std::runtime_error("boom"); });
    CHECK(driver.call([] { return 1; }) == 1);
    auto failures = rt.failures();
    REQUIRE(failures.size() == 1);
    CHECK_THAT(failures[0], Catch::Contains("boom"));
    driver.stop();
    driver.stop();  // idempotent
    auto id = driver.call([] { return std::this_thread::get_id(); });
    CHECK(id == std::this_thread::get_id());
}

TEST_CASE("realtime_driver serves its inbox between timer instants while virtual time lags", "[actors][driver]") {
    runtime rt(run_mode::deterministic);
    realtime_driver driver(rt);
    driver.start();
    auto strand = rt.make_strand();
    // A chain of 200 timers 0.1 ms apart whose handlers each take 2 ms of real time
    // (a device whose host-side compute is slower than its modelled step): virtual
    // time falls behind the wall clock for the whole chain.
    constexpr int k_links = 200;
    std::atomic<int> links{0};
    std::function<void()> link = [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        if (++links < k_links) rt.schedule_after(strand, std::chrono::microseconds(100), link);
    };
    driver.post([&] { rt.schedule_after(strand, std::chrono::microseconds(100), link); });
    REQUIRE(wait_until([&] { return links.load() >= 5; }));
    // Work from another thread runs at the next instant, not after the backlog.
    int seen_at = driver.call([&] { return links.load(); });
    CHECK(seen_at < k_links);
    REQUIRE(wait_until([&] { return links.load() == k_links; }));
    driver.stop();
}
