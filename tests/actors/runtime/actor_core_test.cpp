#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/container_hash/hash.hpp>
#include <catch2/catch.hpp>
#include <random>
#include <thread>

#include "actors/runtime/actor.hpp"
#include "actors/runtime/ask.hpp"
#include "actors/runtime/lifecycle.hpp"
#include "config/invariant.hpp"

using namespace calserve;
using namespace calserve::actors;
using namespace std::chrono_literals;

namespace {

struct ping {
    int sender = 0;
    int seq = 0;
};
struct query {
    int value = 0;
    reply_to<int> reply;
};
using counter_message = std::variant<ping, query>;

class counter_actor : public actor<counter_actor, counter_message> {
public:
    counter_actor(runtime& rt, std::size_t capacity, int senders)
        : actor(rt, "counter", capacity), last_(senders, -1) {}

    void on_message(counter_message& msg) {
        if (inside_.exchange(true)) overlapped_ = true;
        std::visit([this](auto& m) { on(m); }, msg);
        inside_.store(false);
    }
    void on(ping& p) {
        if (p.seq != last_[p.sender] + 1) out_of_order_ = true;
        last_[p.sender] = p.seq;
        ++count_;
    }
    void on(query& q) {
        if (q.value >= 0) q.reply(q.value * 2);  // negative: never answer (ask must time out)
    }

    std::atomic<bool> inside_{false};
    bool overlapped_ = false;
    bool out_of_order_ = false;
    long count_ = 0;
    std::vector<int> last_;
};

}  // namespace

TEST_CASE("per-sender FIFO and one handler at a time under 8 threads", "[actors]") {
    constexpr int k_senders = 8;
    constexpr int k_per_sender = 4000;
    runtime rt(run_mode::threaded, 8);
    auto addr = spawn<counter_actor>(rt, std::size_t(k_senders * k_per_sender), k_senders);
    rt.start();
    std::vector<std::thread> senders;
    std::atomic<int> refused{0};  // Catch2 assertions are not thread-safe: count here, check below
    for (int s = 0; s < k_senders; ++s)
        senders.emplace_back([&, s] {
            for (int i = 0; i < k_per_sender; ++i)
                if (addr.tell(ping{s, i}) != tell_status::accepted) ++refused;
        });
    for (auto& t : senders) t.join();
    REQUIRE(refused.load() == 0);
    auto actor = addr.lock();
    while (actor->mailbox_size() > 0) std::this_thread::sleep_for(1ms);
    rt.stop();
    CHECK(actor->count_ == long(k_senders) * k_per_sender);
    CHECK_FALSE(actor->out_of_order_);
    CHECK_FALSE(actor->overlapped_);
    CHECK(rt.failures().empty());
}

TEST_CASE("a full mailbox answers overloaded and never blocks", "[actors]") {
    runtime rt(run_mode::deterministic);
    auto addr = spawn<counter_actor>(rt, std::size_t(4), 1);
    for (int i = 0; i < 4; ++i) REQUIRE(addr.tell(ping{0, i}) == tell_status::accepted);
    REQUIRE(addr.tell(ping{0, 4}) == tell_status::overloaded);
    REQUIRE(addr.lock()->mailbox_size() == 4);
    rt.run_until_idle();
    REQUIRE(addr.lock()->count_ == 4);
    REQUIRE(addr.tell(ping{0, 4}) == tell_status::accepted);
    rt.run_until_idle();
    REQUIRE(addr.lock()->count_ == 5);
    despawn(rt, addr);
    REQUIRE(addr.tell(ping{0, 5}) == tell_status::stopped);
}

TEST_CASE("ask returns the reply, or deadline_exceeded in virtual time", "[actors]") {
    runtime rt(run_mode::deterministic);
    auto addr = spawn<counter_actor>(rt, std::size_t(16), 1);
    std::optional<result<int>> answered, timed_out;
    boost::asio::co_spawn(
        rt.context(),
        [&]() -> boost::asio::awaitable<void> {
            answered = co_await ask<int>(addr, [](reply_to<int> r) { return query{21, std::move(r)}; }, 1s);
            timed_out = co_await ask<int>(addr, [](reply_to<int> r) { return query{-1, std::move(r)}; }, 5s);
        },
        boost::asio::detached);
    rt.run_until_idle();
    REQUIRE(answered.has_value());
    REQUIRE(answered->ok());
    REQUIRE(answered->value() == 42);
    REQUIRE_FALSE(timed_out.has_value());
    auto before = rt.now();
    REQUIRE(rt.advance_to_next_timer());  // the first ask's (cancelled) timer or the second's
    while (!timed_out && rt.advance_to_next_timer()) {
    }
    REQUIRE(timed_out.has_value());
    REQUIRE(timed_out->code() == status::deadline_exceeded);
    REQUIRE(rt.now() - before == 5s);
}

TEST_CASE("deterministic mode runs 10 hours of virtual timers", "[actors]") {
    runtime rt(run_mode::deterministic);
    auto strand = rt.make_strand();
    long fired = 0;
    std::function<void()> tick = [&] {
        ++fired;
        if (fired < 36000) rt.schedule_after(strand, 1s, tick);
    };
    rt.schedule_after(strand, 1s, tick);
    auto cancelled = rt.schedule_after(strand, 2s, [&] { fired += 1000000; });
    cancelled.cancel();
    while (rt.advance_to_next_timer()) {
    }
    REQUIRE(fired == 36000);
    REQUIRE(rt.now() == std::chrono::hours(10));
}

namespace {
// A random network: each node forwards a hop count to seeded-random peers after
// seeded-random virtual delays.
struct hop {
    int remaining = 0;
};
using node_message = std::variant<hop>;
class node_actor : public actor<node_actor, node_message> {
public:
    node_actor(runtime& rt, int index, std::uint64_t seed, std::vector<address<node_actor>>* peers)
        : actor(rt, "node" + std::to_string(index)), rng_(seed * 1000 + index), peers_(peers) {}
    void on_message(node_message& msg) {
        int remaining = std::get<hop>(msg).remaining;
        if (remaining == 0) return;
        auto& peer = (*peers_)[rng_() % peers_->size()];
        auto delay = std::chrono::milliseconds(rng_() % 50);
        if (delay.count() % 3 == 0) {
            (void)peer.tell(hop{remaining - 1}, id());
        } else {
            start_timer(delay, [peer, remaining, me = id()] { (void)peer.tell(hop{remaining - 1}, me); });
        }
    }
    std::mt19937_64 rng_;
    std::vector<address<node_actor>>* peers_;
};

std::size_t run_network(std::uint64_t seed) {
    runtime rt(run_mode::deterministic);
    std::size_t h = 0;
    std::size_t deliveries = 0;
    rt.set_delivery_hook([&](const delivery& d) {
        boost::hash_combine(h, d.sequence);
        boost::hash_combine(h, d.time.count());
        boost::hash_combine(h, d.from.value);
        boost::hash_combine(h, d.to.value);
        boost::hash_combine(h, std::string(d.type));
        ++deliveries;
    });
    std::vector<address<node_actor>> peers;
    for (int i = 0; i < 16; ++i) peers.push_back(spawn<node_actor>(rt, i, seed, &peers));
    std::mt19937_64 starts(seed);
    for (int i = 0; i < 32; ++i) (void)peers[starts() % peers.size()].tell(hop{200});
    while (rt.advance_to_next_timer()) {
    }
    REQUIRE(deliveries == 32 * 201);
    return h;
}
}  // namespace

TEST_CASE("a seeded random actor network gives the same trace hash on every run", "[actors]") {
    std::size_t first = run_network(7);
    for (int run = 0; run < 20; ++run) REQUIRE(run_network(7) == first);
    REQUIRE(run_network(8) != first);
}

namespace {
enum class door : std::uint8_t { closed, open, locked };
constexpr std::string_view to_string(door d) {
    switch (d) {
        case door::closed: return "closed";
        case door::open: return "open";
        case door::locked: return "locked";
    }
    return "?";
}
constexpr std::array<transition<door>, 4> k_door_table{{
    {door::closed, door::open},
    {door::open, door::closed},
    {door::closed, door::locked},
    {door::locked, door::closed},
}};
static_assert(is_legal(k_door_table, door::closed, door::open));
static_assert(!is_legal(k_door_table, door::open, door::locked));
}  // namespace

TEST_CASE("an illegal transition is reported and not applied", "[actors]") {
    std::vector<std::string> reports;
    set_illegal_transition_handler([&](std::string_view owner, std::string_view from, std::string_view to) {
        reports.push_back(std::string(owner) + ":" + std::string(from) + "->" + std::string(to));
    });
    auto before = illegal_transitions_total();
    lifecycle<door, 4> d(k_door_table, door::closed, "door1");
    REQUIRE(d.transition_to(door::open));
    REQUIRE_FALSE(d.transition_to(door::locked));
    REQUIRE(d.state() == door::open);
    REQUIRE(illegal_transitions_total() == before + 1);
    REQUIRE(reports == std::vector<std::string>{"door1:open->locked"});
    set_illegal_transition_handler(nullptr);
}

TEST_CASE("message names are the unqualified type names", "[actors]") {
    REQUIRE(message_name<ping>() == "ping");
    REQUIRE(message_name<query>() == "query");
}

TEST_CASE("a throwing handler is reported as a failure and the actor lives on", "[actors]") {
    struct boom {};
    using boom_message = std::variant<boom, ping>;
    struct fragile : actor<fragile, boom_message> {
        fragile(runtime& rt) : actor(rt, "fragile") {}
        int pings = 0;
        void on_message(boom_message& m) {
            if (std::holds_alternative<boom>(m)) CALSERVE_INVARIANT(false, "boom");
            ++pings;
        }
    };
    runtime rt(run_mode::deterministic);
    auto addr = spawn<fragile>(rt);
    (void)addr.tell(boom{});
    (void)addr.tell(ping{});
    rt.run_until_idle();
    REQUIRE(rt.failures().size() == 1);
    REQUIRE_THAT(rt.failures()[0], Catch::Contains("boom"));
    REQUIRE(addr.lock()->pings == 1);
}

TEST_CASE("cancelled virtual timers are dropped from the heap and the rest fire in order", "[actors]") {
    runtime rt(run_mode::deterministic);
    auto strand = rt.make_strand();
    std::vector<int> fired;
    std::vector<timer_handle> handles;
    for (int i = 0; i < 5000; ++i)
        handles.push_back(rt.schedule_after(strand, std::chrono::milliseconds(1 + (i * 7919) % 5000), [&fired, i] { fired.push_back(i); }));
    for (int i = 0; i < 5000; ++i)
        if (i % 5 != 0) handles[std::size_t(i)].cancel();
    rt.schedule_after(strand, 1h, [] {});  // the next schedule compacts
    CHECK(rt.pending_timers() == 1001);
    while (rt.advance_to_next_timer()) {
    }
    REQUIRE(fired.size() == 1000);
    for (std::size_t k = 1; k < fired.size(); ++k)  // (due, creation) order survives the compaction
        CHECK((fired[k - 1] * 7919) % 5000 < (fired[k] * 7919) % 5000);
}

TEST_CASE("a cancelled threaded timer releases its callback at once", "[actors]") {
    runtime rt(run_mode::threaded, 2);
    rt.start();
    auto held = std::make_shared<int>(7);
    std::weak_ptr<int> watch = held;
    auto strand = rt.make_strand();
    auto handle = rt.schedule_after(strand, 1h, [held = std::move(held)] { (void)held; });
    CHECK_FALSE(watch.expired());
    handle.cancel();
    handle.cancel();  // idempotent
    const auto end = std::chrono::steady_clock::now() + 20s;
    while (!watch.expired() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(1ms);
    CHECK(watch.expired());  // not an hour later
    rt.stop();
}
