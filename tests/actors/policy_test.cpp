#include <catch2/catch.hpp>
#include <vector>

#include "actors/kv_pool.hpp"
#include "actors/schedule_policy.hpp"

using namespace calserve;
using namespace calserve::actors;
using namespace std::chrono_literals;

TEST_CASE("kv_pool plan/commit/extend/release conserve blocks", "[actors][kv]") {
    kv_pool pool(10, 16);
    auto plan = pool.try_reserve(1, 33);  // 3 blocks
    REQUIRE(plan);
    REQUIRE(plan->blocks == 3);
    REQUIRE(pool.free_blocks() == 10);  // planning mutates nothing
    REQUIRE(pool.commit(*plan).ok());
    REQUIRE(pool.free_blocks() == 7);
    REQUIRE(pool.commit(*plan).code() == status::sequence_exists);
    REQUIRE(pool.extend(1, 17).ok());
    REQUIRE(pool.used_blocks() == 2);
    REQUIRE(pool.extend(1, 49).code() == status::kv_full);
    REQUIRE(pool.extend(99, 1).code() == status::unknown_sequence);
    REQUIRE_FALSE(pool.try_reserve(2, 16 * 8));  // 8 blocks > 7 free
    auto small = pool.try_reserve(2, 16 * 7);
    REQUIRE(small);
    REQUIRE(pool.commit(*small).ok());
    REQUIRE(pool.free_blocks() == 0);
    REQUIRE(pool.conserved());
    REQUIRE(pool.release(1) == 3);
    REQUIRE(pool.release(1) == 0);
    REQUIRE(pool.release(2) == 7);
    REQUIRE(pool.free_blocks() == 10);
    REQUIRE(pool.conserved());
    REQUIRE(pool.could_fit(160));
    REQUIRE_FALSE(pool.could_fit(161));
}

namespace {
seq_view decode_seq(std::uint64_t id, long served_ms) { return {id, false, true, 0ms, std::chrono::milliseconds(served_ms)}; }
seq_view prefill_seq(std::uint64_t id, long arrived_ms) {
    return {id, true, true, std::chrono::milliseconds(arrived_ms), 0ms};
}
}  // namespace

TEST_CASE("plan_next_job table", "[actors][schedule]") {
    schedule_params params{1, 2s};
    struct row {
        const char* name;
        std::vector<seq_view> seqs;
        tick_state state;
        long now_ms;
        std::optional<job_choice> expected;
    };
    seq_view busy = decode_seq(9, 0);
    busy.ready = false;
    std::vector<row> rows = {
        {"nothing runnable", {}, {}, 0, std::nullopt},
        {"only busy sequences", {busy}, {}, 0, std::nullopt},
        {"single decode", {decode_seq(1, 5)}, {}, 10, job_choice{1, false}},
        {"least recently served decode first", {decode_seq(1, 7), decode_seq(2, 3)}, {}, 10, job_choice{2, false}},
        {"served tie broken by id", {decode_seq(4, 3), decode_seq(2, 3)}, {}, 10, job_choice{2, false}},
        {"prefill when no decode", {prefill_seq(5, 1), prefill_seq(3, 2)}, {}, 10, job_choice{5, true}},
        {"FCFS tie broken by id", {prefill_seq(5, 1), prefill_seq(3, 1)}, {}, 10, job_choice{3, true}},
        {"decode first until the round is done",
         {decode_seq(1, 0), decode_seq(2, 0), prefill_seq(3, 0)}, {0, 1}, 10, job_choice{1, false}},
        {"prefill after every decoder advanced",
         {decode_seq(1, 0), decode_seq(2, 0), prefill_seq(3, 0)}, {0, 2}, 10, job_choice{3, true}},
        {"prefill budget spent -> decode",
         {decode_seq(1, 0), prefill_seq(3, 0)}, {1, 5}, 10, job_choice{1, false}},
        {"aged prefill jumps the round",
         {decode_seq(1, 0), decode_seq(2, 0), prefill_seq(3, 0)}, {0, 0}, 2000, job_choice{3, true}},
        {"busy decoder does not block prefill", {busy, prefill_seq(3, 0)}, {0, 0}, 10, job_choice{3, true}},
    };
    for (const auto& r : rows) {
        INFO(r.name);
        auto got = plan_next_job(r.seqs, r.state, params, std::chrono::milliseconds(r.now_ms));
        REQUIRE(got == r.expected);
    }
}

TEST_CASE("two runnable sequences alternate", "[actors][schedule]") {
    std::vector<seq_view> seqs = {decode_seq(1, 0), decode_seq(2, 0)};
    tick_state state;
    std::vector<std::uint64_t> order;
    for (int step = 1; step <= 6; ++step) {
        auto c = plan_next_job(seqs, state, {}, std::chrono::milliseconds(step));
        REQUIRE(c);
        order.push_back(c->seq);
        state = after_job(state, *c);
        for (auto& s : seqs)
            if (s.seq == c->seq) s.last_served = std::chrono::milliseconds(step);
    }
    REQUIRE(order == std::vector<std::uint64_t>{1, 2, 1, 2, 1, 2});
}

TEST_CASE("plan_admission table", "[actors][schedule]") {
    using d = admission_decision;
    REQUIRE(plan_admission({0, 0, 4, 4, true, true, true}) == d{admission::admit, status::ok});
    REQUIRE(plan_admission({4, 0, 4, 4, true, true, true}) == d{admission::queue, status::ok});
    REQUIRE(plan_admission({1, 0, 4, 4, false, true, true}) == d{admission::queue, status::ok});
    REQUIRE(plan_admission({1, 1, 4, 4, true, true, true}) == d{admission::queue, status::ok});  // FCFS: no overtaking
    REQUIRE(plan_admission({4, 4, 4, 4, true, true, true}) == d{admission::reject, status::queue_full});
    REQUIRE(plan_admission({0, 0, 4, 0, false, true, true}) == d{admission::reject, status::queue_full});
    REQUIRE(plan_admission({0, 0, 4, 4, true, false, true}) == d{admission::reject, status::context_overflow});
    REQUIRE(plan_admission({0, 0, 4, 4, true, true, false}) == d{admission::reject, status::not_ready});
}
