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
    REQUIRE(fits_context(160, 0, pool.capacity_tokens()));
    REQUIRE_FALSE(fits_context(161, 0, pool.capacity_tokens()));
}

namespace {
seq_view decode_seq(std::uint64_t id, long served_ms, int group = k_no_group) {
    return {id, false, true, 0ms, std::chrono::milliseconds(served_ms), group, false};
}
seq_view prefill_seq(std::uint64_t id, long arrived_ms) {
    return {id, true, true, std::chrono::milliseconds(arrived_ms), 0ms, k_no_group, false};
}
job_choice decode(std::vector<std::uint64_t> rows) { return {false, std::move(rows)}; }
job_choice prefill(std::uint64_t seq) { return {true, {seq}}; }
}  // namespace

TEST_CASE("plan_next_job table (batch 1)", "[actors][schedule]") {
    schedule_params params{1, 2s, 1, 2};
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
        {"single decode", {decode_seq(1, 5)}, {}, 10, decode({1})},
        {"least recently served decode first", {decode_seq(1, 7), decode_seq(2, 3)}, {}, 10, decode({2})},
        {"served tie broken by id", {decode_seq(4, 3), decode_seq(2, 3)}, {}, 10, decode({2})},
        {"prefill when no decode", {prefill_seq(5, 1), prefill_seq(3, 2)}, {}, 10, prefill(5)},
        {"FCFS tie broken by id", {prefill_seq(5, 1), prefill_seq(3, 1)}, {}, 10, prefill(3)},
        {"decode first until the round is done",
         {decode_seq(1, 0), decode_seq(2, 0), prefill_seq(3, 0)}, {0, 1}, 10, decode({1})},
        {"prefill after every group advanced",
         {decode_seq(1, 0), decode_seq(2, 0), prefill_seq(3, 0)}, {0, 2}, 10, prefill(3)},
        {"prefill budget spent -> decode", {decode_seq(1, 0), prefill_seq(3, 0)}, {1, 5}, 10, decode({1})},
        {"aged prefill jumps the round",
         {decode_seq(1, 0), decode_seq(2, 0), prefill_seq(3, 0)}, {0, 0}, 2000, prefill(3)},
        {"busy decoder does not block prefill", {busy, prefill_seq(3, 0)}, {0, 0}, 10, prefill(3)},
    };
    for (const auto& r : rows) {
        INFO(r.name);
        auto got = plan_next_job(r.seqs, r.state, params, std::chrono::milliseconds(r.now_ms));
        REQUIRE(got == r.expected);
    }
}

TEST_CASE("plan_next_job table (decode batches)", "[actors][schedule]") {
    struct row {
        const char* name;
        int max_batch;
        std::vector<seq_view> seqs;
        slot_view where;
        tick_state state;
        std::optional<job_choice> expected;
    };
    auto awaiting = [](seq_view s) { s.ready = false; s.awaiting = true; return s; };
    auto in_flight = [](seq_view s) { s.ready = false; s.in_job = true; return s; };
    std::vector<row> rows = {
        {"other slot idle: every group eligible, half of the decoders", 4,
         {decode_seq(1, 4, 1), decode_seq(2, 3, 0), decode_seq(3, 2), decode_seq(4, 1, 1)}, {0, false}, {}, decode({3, 4})},
        {"two groups: the other group in a job does not hold", 2,
         {decode_seq(1, 0, 0), in_flight(decode_seq(2, 0, 1)), in_flight(decode_seq(3, 0, 1)), decode_seq(4, 0, 0)},
         {0, true}, {}, decode({1, 4})},
        {"an awaiting decoder of an idle other slot holds the step", 4,
         {decode_seq(1, 0, 0), awaiting(decode_seq(2, 0, 1)), prefill_seq(3, 0)}, {0, false}, {0, 0}, std::nullopt},
        {"two groups: own group and unassigned, not the busy slot's", 2,
         {decode_seq(1, 0, 0), decode_seq(2, 0, 1), decode_seq(3, 0), decode_seq(4, 0, 0)}, {0, true}, {}, decode({1, 3})},
        {"two groups: the busy slot's rows are in flight", 2,
         {decode_seq(1, 0, 0), in_flight(decode_seq(2, 0, 1)), in_flight(decode_seq(3, 0, 1)), decode_seq(4, 0, 0)},
         {0, true}, {}, decode({1, 4})},
        {"two groups: an awaiting member holds its group's step", 2,
         {decode_seq(1, 0, 0), awaiting(decode_seq(2, 0, 0)), in_flight(decode_seq(3, 0, 1)), in_flight(decode_seq(5, 0, 1))},
         {0, true}, {}, std::nullopt},
        {"two groups: an awaiting member of the busy slot's group does not", 2,
         {decode_seq(1, 0, 0), awaiting(decode_seq(2, 0, 1)), decode_seq(3, 0, 1), in_flight(decode_seq(4, 0, 1))},
         {0, true}, {}, decode({1})},
        {"two groups: each capped at half the decoders and max_batch, least recently served first", 4,
         {decode_seq(1, 9), decode_seq(2, 8), decode_seq(3, 7), decode_seq(4, 6), decode_seq(5, 5), decode_seq(6, 4),
          decode_seq(7, 3), decode_seq(8, 2), decode_seq(9, 1), decode_seq(10, 0)},
         {1, false}, {}, decode({7, 8, 9, 10})},
        {"held decode: a prefill goes once the round is done", 4, {awaiting(decode_seq(1, 0)), prefill_seq(5, 0)},
         {0, true}, {0, 5}, prefill(5)},
        {"held decode, round not done: wait for the step boundary", 4, {awaiting(decode_seq(1, 0)), prefill_seq(5, 0)},
         {0, true}, {0, 0}, std::nullopt},
    };
    for (const auto& r : rows) {
        INFO(r.name);
        schedule_params params{1, 2s, r.max_batch, 2, 2};
        auto got = plan_next_job(r.seqs, r.state, params, 10ms, r.where);
        REQUIRE(got == r.expected);
    }
}

TEST_CASE("plan_next_job table (one decode group)", "[actors][schedule]") {
    struct row {
        const char* name;
        int max_batch;
        std::vector<seq_view> seqs;
        slot_view where;
        tick_state state;
        std::optional<job_choice> expected;
    };
    auto awaiting = [](seq_view s) { s.ready = false; s.awaiting = true; return s; };
    auto in_flight = [](seq_view s) { s.ready = false; s.in_job = true; return s; };
    auto prefilling = [](seq_view s) { s.ready = false; s.in_job = true; s.in_prefill = true; return s; };
    auto chainable = [](seq_view s) { s.ready = false; s.in_job = true; s.chainable = true; return s; };
    std::vector<row> rows = {
        {"token chaining: rows in the other slot's job, drawn on the device, form the next step now", 16,
         {chainable(decode_seq(1, 0)), chainable(decode_seq(2, 0))}, {1, true}, {}, decode({1, 2})},
        {"token chaining: a ready row joins the chained rows", 16,
         {chainable(decode_seq(1, 2)), decode_seq(2, 1), chainable(decode_seq(3, 3))}, {1, true}, {}, decode({1, 2, 3})},
        {"token chaining: a row of that job the device does not draw holds the step", 16,
         {chainable(decode_seq(1, 0)), in_flight(decode_seq(2, 0))}, {1, true}, {}, std::nullopt},
        {"token chaining: two groups never chain (a group's rows stay in their slot)", 16,
         {chainable(decode_seq(1, 0, 0)), chainable(decode_seq(2, 0, 0))}, {1, true}, {}, std::nullopt},
        {"every decoder in one batch, groups ignored", 16,
         {decode_seq(1, 4, 1), decode_seq(2, 3, 0), decode_seq(3, 2), decode_seq(4, 1, 1)}, {0, true}, {},
         decode({1, 2, 3, 4})},
        {"a decoder in the other slot's job holds the batch: it joins at the step boundary", 16,
         {decode_seq(1, 0), decode_seq(2, 0), in_flight(decode_seq(3, 0))}, {0, true}, {}, std::nullopt},
        {"a sequence in its prefill does not hold the batch: it joins at the next boundary", 16,
         {decode_seq(1, 0), decode_seq(2, 0), prefilling(decode_seq(3, 0))}, {0, true}, {}, decode({1, 2})},
        {"an awaiting decoder holds the batch", 16, {decode_seq(1, 0), awaiting(decode_seq(2, 0))}, {1, false}, {},
         std::nullopt},
        {"held batch: a waiting prefill takes the free slot once the round is done", 16,
         {decode_seq(1, 0), in_flight(decode_seq(2, 0)), prefill_seq(3, 0)}, {0, true}, {0, 1}, prefill(3)},
        {"more decoders than max_batch: the ready ones go, least recently served first", 2,
         {decode_seq(1, 9), decode_seq(2, 1), in_flight(decode_seq(3, 0)), decode_seq(4, 2)}, {0, true}, {},
         decode({2, 4})},
        {"more decoders than max_batch: a round is every decoder once", 2,
         {decode_seq(1, 0), decode_seq(2, 0), decode_seq(3, 0), prefill_seq(7, 0)}, {0, false}, {0, 1}, decode({1, 2})},
    };
    for (const auto& r : rows) {
        INFO(r.name);
        schedule_params params{1, 2s, r.max_batch, 2, r.name == std::string_view("token chaining: two groups never chain (a group's rows stay in their slot)") ? 2 : 1};
        auto got = plan_next_job(r.seqs, r.state, params, 10ms, r.where);
        REQUIRE(got == r.expected);
    }
}

TEST_CASE("group_cap and pick_profile", "[actors][schedule]") {
    schedule_params two{1, 2s, 16, 2, 2}, one{1, 2s, 16, 1, 2};
    REQUIRE(group_cap(1, two) == 1);
    REQUIRE(group_cap(2, two) == 1);
    REQUIRE(group_cap(16, two) == 8);
    REQUIRE(group_cap(20, two) == 10);
    REQUIRE(group_cap(40, two) == 16);
    REQUIRE(group_cap(5, one) == 5);
    schedule_params b1{1, 2s, 1, 2};
    REQUIRE(group_cap(2, b1) == 1);  // batch-1 programs: two sequences alternate on ping/pong
    const std::vector<std::int64_t> profiles{1, 2, 4, 8, 16};
    REQUIRE(pick_profile(profiles, 1) == 0u);   // index of batch 1
    REQUIRE(pick_profile(profiles, 3) == 2u);   // batch 4
    REQUIRE(pick_profile(profiles, 9) == 4u);   // batch 16
    REQUIRE_FALSE(pick_profile(profiles, 17));
    REQUIRE_FALSE(pick_profile(std::vector<std::int64_t>{}, 1));
    const std::vector<victim_view> none;
    REQUIRE_FALSE(plan_victim(none));
    const std::vector<victim_view> v{{3, 7}, {9, 12}, {4, 2}};
    REQUIRE(plan_victim(v) == 9u);
}

TEST_CASE("preemption eligibility table", "[actors][schedule][kv]") {
    struct row {
        const char* name;
        victim_view v;
        bool preemptible;
    };
    // holds_kv, in_job, kv_request_out, ending
    const row rows[] = {
        {"idle, holding KV (ready, awaiting)", {1, 1, true, false, false, false}, true},
        {"waiting for KV (kv_wait)", {1, 1, false, false, false, false}, false},
        {"in a job (prefill, decode)", {1, 1, true, true, false, false}, false},
        {"a kv_grow out (growing)", {1, 1, true, false, true, false}, false},
        {"ending, job out (finishing_job)", {1, 1, true, true, false, true}, false},
        {"ending, grow out (finishing_grow)", {1, 1, true, false, true, true}, false},
        {"ending, idle", {1, 1, true, false, false, true}, false},
    };
    for (const auto& r : rows) {
        INFO(r.name);
        REQUIRE(preemptible(r.v) == r.preemptible);
    }
    // The most recently admitted candidate; non-candidates are skipped however recent.
    const std::vector<victim_view> seqs{
        {1, 1, true, false, false, false},   // candidate, oldest
        {2, 5, true, true, false, false},    // in a job
        {3, 3, true, false, false, false},   // candidate
        {4, 9, false, false, false, false},  // waiting for KV
        {5, 8, true, false, true, false},    // growing
        {6, 7, true, false, false, true},    // ending
    };
    REQUIRE(plan_victim(seqs) == 3u);
    const std::vector<victim_view> busy{{2, 5, true, true, false, false}, {4, 9, false, false, false, false}};
    REQUIRE_FALSE(plan_victim(busy));
}

TEST_CASE("KV sizing table", "[actors][schedule][kv]") {
    struct row {
        const char* name;
        kv_sizing kv;
        std::int64_t tokens, full;
        std::int64_t reserve, grow;
    };
    const kv_sizing on_demand{kv_policy::on_demand, 8, 16};
    const kv_sizing reserve{kv_policy::reserve, 8, 16};
    const row rows[] = {
        {"on_demand: prompt + step, block-rounded", on_demand, 20, 100, 32, 32},
        {"on_demand: on a block boundary", on_demand, 24, 100, 32, 32},
        {"on_demand: capped at prompt + max_tokens", on_demand, 20, 26, 26, 26},
        {"on_demand: re-admission after a preemption holds the tokens so far", on_demand, 41, 100, 64, 64},
        {"reserve: prompt + max_tokens from admission", reserve, 20, 100, 100, 32},
        {"reserve: full is not rounded past itself", reserve, 3, 17, 17, 16},
        {"block of 1", {kv_policy::on_demand, 4, 1}, 5, 100, 9, 9},
        {"block 0 counts as 1", {kv_policy::on_demand, 4, 0}, 5, 100, 9, 9},
    };
    for (const auto& r : rows) {
        INFO(r.name);
        REQUIRE(kv_reserve_tokens(r.kv, r.tokens, r.full) == r.reserve);
        REQUIRE(kv_grow_tokens(r.kv, r.tokens, r.full) == r.grow);
    }
    REQUIRE_FALSE(kv_needs_grow(32, 32));
    REQUIRE(kv_needs_grow(33, 32));
    REQUIRE(kv_sizing{}.policy == kv_policy::on_demand);  // the configuration's default (runtime.kv_policy)
}

TEST_CASE("two runnable sequences alternate", "[actors][schedule]") {
    std::vector<seq_view> seqs = {decode_seq(1, 0), decode_seq(2, 0)};
    tick_state state;
    std::vector<std::uint64_t> order;
    schedule_params params{1, 2s, 1, 2};
    for (int step = 1; step <= 6; ++step) {
        auto c = plan_next_job(seqs, state, params, std::chrono::milliseconds(step));
        REQUIRE(c);
        REQUIRE(c->rows.size() == 1);
        order.push_back(c->rows[0]);
        state = after_job(state, *c);
        for (auto& s : seqs)
            if (s.seq == c->rows[0]) s.last_served = std::chrono::milliseconds(step);
    }
    REQUIRE(order == std::vector<std::uint64_t>{1, 2, 1, 2, 1, 2});
}

TEST_CASE("plan_door table", "[actors][schedule]") {
    using d = admission_decision;
    // in_flight, max_in_flight, fits_context, accepting, device_dead
    REQUIRE(plan_door({0, 8, true, true, true}) == d{admission::reject, status::device_dead});
    REQUIRE(plan_door({0, 8, false, false, true}) == d{admission::reject, status::device_dead});
    REQUIRE(plan_door({0, 8, false, false, false}) == d{admission::reject, status::not_ready});
    REQUIRE(plan_door({8, 8, false, true, false}) == d{admission::reject, status::context_overflow});
    REQUIRE(plan_door({0, 8, true, true, false}) == d{admission::admit, status::ok});
    REQUIRE(plan_door({7, 8, true, true, false}) == d{admission::admit, status::ok});
    REQUIRE(plan_door({8, 8, true, true, false}) == d{admission::reject, status::queue_full});
    REQUIRE(plan_door({0, 0, true, true, false}) == d{admission::reject, status::queue_full});
}

TEST_CASE("plan_start table", "[actors][schedule]") {
    using d = admission_decision;
    // running, ahead, max_running, device_dead
    REQUIRE(plan_start({0, 0, 4, true}) == d{admission::reject, status::device_dead});
    REQUIRE(plan_start({0, 0, 4, false}) == d{admission::admit, status::ok});
    REQUIRE(plan_start({3, 0, 4, false}) == d{admission::admit, status::ok});
    REQUIRE(plan_start({4, 0, 4, false}) == d{admission::queue, status::ok});
    REQUIRE(plan_start({1, 1, 4, false}) == d{admission::queue, status::ok});  // FCFS: no overtaking
    REQUIRE(plan_start({9, 100, 4, false}) == d{admission::queue, status::ok});  // the door bounds the queue
}

TEST_CASE("prefill_chunk_limit: whole when alone, the fixed chunk beside others", "[actors][schedule]") {
    const auto unpriced = [](std::int64_t) { return 0ns; };
    struct row {
        std::int64_t pending, chunk;
        bool others;
        std::int64_t limit;  // 0 = the whole rest in one job
    };
    for (const auto& r : {row{8192, 512, false, 0},  // alone: each chunk would re-read the weights
                          row{8192, 512, true, 512},  // beside decoding streams: the token budget
                          row{300, 512, true, 512},   // the codec feeds the last (or only) chunk whole
                          row{8192, 0, true, 0}}) {   // runtime.prefill_chunk=0: whole prompts
        INFO(r.pending << " " << r.chunk << " " << r.others);
        CHECK(prefill_chunk_limit({r.chunk, 0ms}, r.others, r.pending, unpriced) == r.limit);
        CHECK(prefill_chunk_limit({r.chunk, 100ms}, r.others, r.pending, unpriced) == r.limit);  // cannot price
    }
}

TEST_CASE("prefill_chunk_limit: beside others, the most tokens priced within the target", "[actors][schedule]") {
    // A chunk costs a weight read (40 ms) and 0.1 ms per token: 100 ms buys 600 tokens.
    int calls = 0;
    const auto linear = [&](std::int64_t t) {
        ++calls;
        return std::chrono::duration_cast<nanoseconds>(40ms + t * 100us);
    };
    struct row {
        std::int64_t pending;
        nanoseconds target;
        std::int64_t limit;
    };
    for (const auto& r : {row{8192, 100ms, 600},    // the token budget the target buys
                          row{8192, 150ms, 1100},
                          row{8192, 40ms + 6400us, k_prefill_chunk_min},  // exactly the floor
                          row{8192, 10ms, k_prefill_chunk_min},           // nothing fits: the floor, progress
                          row{600, 100ms, 0},      // the rest fits the target: one job
                          row{601, 100ms, 600},
                          row{40, 1ms, 0}}) {      // shorter than the floor: whole
        INFO(r.pending << " tokens, target " << r.target.count() << " ns");
        calls = 0;
        const auto limit = prefill_chunk_limit({512, r.target}, true, r.pending, linear);
        CHECK(calls <= 16);  // a bisection, not a scan
        CHECK(limit == r.limit);
        if (limit > 0) CHECK(linear(limit) <= std::max(r.target, linear(k_prefill_chunk_min)));
        if (limit > 0 && limit < r.pending && limit > k_prefill_chunk_min) CHECK(linear(limit + 1) > r.target);
    }
    CHECK(prefill_chunk_limit({512, 100ms}, false, 8192, linear) == 0);  // alone: whole, whatever the price
    CHECK(prefill_chunk_limit({0, 100ms}, true, 8192, linear) == 0);     // runtime.prefill_chunk=0: always whole
    // A price that grows with the past (attention): later chunks of the same prompt are smaller.
    const auto with_past = [](std::int64_t past) {
        return [past](std::int64_t t) { return std::chrono::duration_cast<nanoseconds>(40ms + t * (100us + past * 10ns)); };
    };
    CHECK(prefill_chunk_limit({512, 100ms}, true, 8192, with_past(4096)) <
          prefill_chunk_limit({512, 100ms}, true, 8192, with_past(0)));
}

TEST_CASE("admission window: after a sequence leaves, the next decode waits for a prompt to take its place",
          "[actors][schedule]") {
    schedule_params params{1, 2s, 8, 2, 1, 2ms};
    auto awaiting_seq = [](std::uint64_t id) { auto s = decode_seq(id, 0); s.ready = false; s.awaiting = true; return s; };
    const std::vector<seq_view> decoders = {decode_seq(1, 0), decode_seq(2, 0)};
    tick_state left;
    left.left_at = 10ms;
    SECTION("closed at the window's end, and never open without a leave or with no window") {
        CHECK(admit_window_until(left, params, 10ms) == 12ms);
        CHECK(admit_window_until(left, params, 11ms) == 12ms);
        CHECK_FALSE(admit_window_until(left, params, 12ms));
        CHECK_FALSE(admit_window_until(tick_state{}, params, 10ms));
        auto none = params;
        none.admit_window = 0ms;
        CHECK_FALSE(admit_window_until(left, none, 10ms));
    }
    SECTION("while open no decode forms; a prompt that arrives goes first; after it the decode goes") {
        CHECK_FALSE(plan_next_job(decoders, left, params, 11ms));
        CHECK(plan_next_job(decoders, left, params, 12ms) == decode({1, 2}));
        auto with_prompt = decoders;
        with_prompt.push_back(prefill_seq(3, 11));
        left.decodes_since_prefill = 1;
        const auto first = plan_next_job(with_prompt, left, params, 11ms);
        REQUIRE(first == prefill(3));
        const auto after = after_job(left, *first);
        CHECK_FALSE(after.left_at);  // a job formed: the window is closed
        CHECK(plan_next_job(decoders, after, params, 11ms) == decode({1, 2}));
    }
    SECTION("it holds only a job that would form without it: nothing to decode, no timer") {
        CHECK(window_holds_until(decoders, left, params, 11ms) == 12ms);
        CHECK_FALSE(window_holds_until(decoders, left, params, 12ms));
        CHECK_FALSE(window_holds_until({}, left, params, 11ms));
        const std::vector<seq_view> waiting = {awaiting_seq(1)};
        CHECK_FALSE(window_holds_until(waiting, left, params, 11ms));  // the step boundary holds it anyway
    }
    SECTION("a decode formed closes the window") {
        CHECK_FALSE(after_job(left, decode({1, 2})).left_at);
    }
}
