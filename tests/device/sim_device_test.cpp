// The simulated device's contract: lifecycle, ping/pong, in-order completion with
// two jobs in flight, CSR/slice errors as request faults, KV accounting, memory
// accounting at configure, numbers equal to the reference model's.
#include <catch2/catch.hpp>

#include <deque>

#include "sim_fixture.hpp"

using namespace calserve;
using namespace calserve::device;
using namespace std::chrono_literals;
using test::k_decode;
using test::k_prefill;

TEST_CASE("ping and pong buffers never alias, and a package where they do is refused") {
    const auto spec = test::tiny_spec();
    for (const auto& sm : spec.submodels) {
        for (const auto& t : sm.inputs) {
            CHECK((t.ping_address + t.bytes <= t.pong_address || t.pong_address + t.bytes <= t.ping_address));
        }
    }
    auto bad = spec;
    bad.submodels[0].outputs[0].pong_address = bad.submodels[0].outputs[0].ping_address + 2;
    auto r = validate(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == status::package_invalid);
    CHECK(fault_class_of(r.code()) == fault_class::model);
}

TEST_CASE("submodels are found by exact name only") {
    test::sim_fixture f;
    CHECK(f.dev->submodel_names() == std::vector<std::string>{k_prefill, k_decode});
    CHECK(f.dev->submodel(k_decode).ok());
    CHECK(f.dev->submodel("tiny_dec").code() == status::submodel_not_found);
    CHECK(f.dev->submodel("tiny_decode ").code() == status::submodel_not_found);
    CHECK(f.dev->infer("decode", slot::ping, 1).code() == status::submodel_not_found);
}

TEST_CASE("lifecycle: infer needs a warmed-up device") {
    sim::manual_scheduler clock;
    sim::sim_options o;
    o.scheduler = &clock;
    o.make_model = [](const package_spec& s) -> result<std::unique_ptr<model::causal_lm>> {
        return std::unique_ptr<model::causal_lm>(std::make_unique<test::history_lm>(s.vocab_size));
    };
    auto dev = sim::sim_device::create(o);
    CHECK(dev->status().state == device_state::created);
    CHECK(dev->configure().code() == status::not_configured);
    REQUIRE(dev->load(test::tiny_spec()).ok());
    CHECK(dev->kv_allocate(1, 0).code() == status::not_configured);
    REQUIRE(dev->configure().ok());
    CHECK(dev->status().state == device_state::configured);
    REQUIRE(dev->kv_allocate(1, 16).ok());
    CHECK(dev->infer(k_prefill, slot::ping, 1).code() == status::not_ready);
    REQUIRE(dev->warmup().ok());
    CHECK(dev->status().state == device_state::ready);
}

TEST_CASE("logits written as BF16 equal the reference model's for the same history") {
    test::sim_fixture f;
    REQUIRE(f.dev->kv_allocate(7, 64).ok());
    auto j = f.submit(k_prefill, slot::ping, 7, {3, 1, 4, 1, 5});
    REQUIRE(j.ok());
    auto r = f.dev->wait(*j, 1s);
    REQUIRE(r.ok());
    CHECK(r->tokens == 5);
    CHECK(r->kv_length == 5);
    CHECK(f.logits(k_prefill, slot::ping) == test::expected_logits({3, 1, 4, 1, 5}));
    j = f.submit(k_decode, slot::pong, 7, {9});
    REQUIRE(j.ok());
    REQUIRE(f.dev->wait(*j, 1s).ok());
    CHECK(f.logits(k_decode, slot::pong) == test::expected_logits({3, 1, 4, 1, 5, 9}));
    CHECK(check_logits_bf16(*f.dev->output(k_decode, slot::pong, "logits")).ok());
}

TEST_CASE("two jobs in flight complete in order, one slot's copy overlaps the other's compute") {
    test::sim_fixture f(10.0, 4.0);  // step 10 ms, d2h 4 ms
    REQUIRE(f.dev->kv_allocate(1, 32).ok());
    REQUIRE(f.dev->kv_allocate(2, 32).ok());
    std::vector<job_id> order;
    std::vector<job_result> results;
    auto a = f.submit(k_prefill, slot::ping, 1, {1, 2});
    auto b = f.submit(k_prefill, slot::pong, 2, {3});
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    CHECK(f.dev->status().jobs_in_flight == 2);
    // A third job has no free slot.
    CHECK(f.dev->infer(k_decode, slot::ping, 1).code() == status::submit_busy);
    for (job_id j : {*b, *a}) {  // register out of order: delivery must still follow submission
        f.dev->wait_async(j, 1s, [&](result<job_result> r) {
            REQUIRE(r.ok());
            order.push_back(r->job);
            results.push_back(*r);
        });
    }
    f.clock.run_until_idle();
    REQUIRE(order == std::vector<job_id>{*a, *b});
    const auto& ta = results[0].timing;
    const auto& tb = results[1].timing;
    CHECK(ta.compute_end_ns - ta.compute_start_ns == 10'000'000);
    CHECK(tb.compute_start_ns == ta.compute_end_ns);        // compute engine is serial
    CHECK(ta.completed_ns - ta.compute_end_ns == 4'000'000);
    CHECK(ta.completed_ns < tb.compute_end_ns);             // a's D2H ran during b's compute
    CHECK(tb.completed_ns == tb.compute_end_ns + 4'000'000);
    CHECK(f.dev->status().jobs_in_flight == 0);
    CHECK(f.dev->compute_busy_ns() >= 20'000'000);
}

TEST_CASE("a slot's buffers belong to the device while its job runs") {
    test::sim_fixture f;
    REQUIRE(f.dev->kv_allocate(1, 32).ok());
    auto a = f.submit(k_prefill, slot::ping, 1, {1, 2});
    REQUIRE(a.ok());
    const std::int32_t tok = 5;
    CHECK(f.dev->write_input(k_decode, slot::ping, "token", std::as_bytes(std::span(&tok, 1))).code() ==
          status::invalid_argument);
    CHECK(f.dev->output(k_prefill, slot::ping, "logits").code() == status::invalid_argument);
    CHECK(f.dev->kv_free(1).code() == status::invalid_argument);
    REQUIRE(f.dev->wait(*a, 1s).ok());
    CHECK(f.dev->output(k_prefill, slot::ping, "logits").ok());
    CHECK(f.dev->output(k_prefill, slot::pong, "logits").code() == status::not_found);
}

TEST_CASE("read_output hands the completed output to the host once, equal to output()") {
    test::sim_fixture f;
    REQUIRE(f.dev->kv_allocate(1, 32).ok());
    std::vector<std::byte> host(7, std::byte{1});  // any old storage: it becomes the device's
    CHECK(f.dev->read_output(k_prefill, slot::ping, "logits", host).code() == status::not_found);
    auto a = f.submit(k_prefill, slot::ping, 1, {1, 2});
    REQUIRE(a.ok());
    CHECK(f.dev->read_output(k_prefill, slot::ping, "logits", host).code() == status::invalid_argument);  // running
    REQUIRE(f.dev->wait(*a, 1s).ok());
    auto view = f.dev->output(k_prefill, slot::ping, "logits");
    REQUIRE(view.ok());
    const std::vector<std::byte> expected(view->begin(), view->end());
    REQUIRE(f.dev->read_output(k_prefill, slot::ping, "logits", host).ok());
    CHECK(host == expected);
    CHECK(check_logits_bf16(host).ok());
    CHECK(f.dev->read_output(k_prefill, slot::ping, "logits", host).code() == status::not_found);  // consumed
    CHECK(host == expected);  // the failed read left the host's copy alone

    // The next job on the slot writes a whole output again, whatever storage the device got back.
    auto b = f.submit(k_decode, slot::ping, 1, {3});
    REQUIRE(b.ok());
    REQUIRE(f.dev->wait(*b, 1s).ok());
    std::vector<std::byte> next;
    REQUIRE(f.dev->read_output(k_decode, slot::ping, "logits", next).ok());
    CHECK(next.size() == std::size_t(f.dev->package().vocab_size) * 2);  // batch-1 decode: one row
    CHECK(check_logits_bf16(next).ok());
}

TEST_CASE("CSR, slice and missing-tensor errors are request faults") {
    test::sim_fixture f;
    REQUIRE(f.dev->kv_allocate(1, 32).ok());
    const std::vector<std::int32_t> tok{1, 2, 3}, pos{0, 1, 2};
    auto fill = [&](bool csr_ok, bool with_position) {
        REQUIRE(f.dev->slice(k_prefill, slot::ping, 3).ok());
        REQUIRE(f.dev->write_input(k_prefill, slot::ping, "token", std::as_bytes(std::span(tok))).ok());
        if (with_position) REQUIRE(f.dev->write_input(k_prefill, slot::ping, "position", std::as_bytes(std::span(pos))).ok());
        REQUIRE(f.dev->write_csr(k_prefill, slot::ping, "cur_seq_len", csr_ok ? 3 : 2).ok());
        REQUIRE(f.dev->write_csr(k_prefill, slot::ping, "past_kv_cur_seq_len", 0).ok());
    };
    SECTION("slice out of range") {
        CHECK(f.dev->slice(k_prefill, slot::ping, 0).code() == status::slice_out_of_range);
        CHECK(f.dev->slice(k_prefill, slot::ping, test::k_context + 1).code() == status::slice_out_of_range);
        CHECK(f.dev->slice(k_decode, slot::ping, 2).code() == status::slice_out_of_range);
        REQUIRE(f.dev->slice(k_prefill, slot::ping, 2).ok());
        CHECK(f.dev->write_input(k_prefill, slot::ping, "token", std::as_bytes(std::span(tok))).code() ==
              status::slice_out_of_range);
    }
    SECTION("wrong cur_seq_len") {
        fill(false, true);
        auto r = f.dev->infer(k_prefill, slot::ping, 1);
        CHECK(r.code() == status::bad_csr);
    }
    SECTION("wrong past_kv_cur_seq_len") {
        fill(true, true);
        REQUIRE(f.dev->write_csr(k_prefill, slot::ping, "past_kv_cur_seq_len", 5).ok());
        CHECK(f.dev->infer(k_prefill, slot::ping, 1).code() == status::bad_csr);
    }
    SECTION("unknown CSR register") {
        CHECK(f.dev->write_csr(k_prefill, slot::ping, "cur_seq", 1).code() == status::bad_csr);
    }
    SECTION("missing tensor") {
        fill(true, false);
        CHECK(f.dev->infer(k_prefill, slot::ping, 1).code() == status::missing_tensor);
    }
    SECTION("inputs must be written again for every job") {
        fill(true, true);
        auto j = f.dev->infer(k_prefill, slot::ping, 1);
        REQUIRE(j.ok());
        REQUIRE(f.dev->wait(*j, 1s).ok());
        CHECK(f.dev->infer(k_prefill, slot::ping, 1).code() == status::missing_tensor);
    }
    SECTION("unknown sequence") {
        fill(true, true);
        CHECK(f.dev->infer(k_prefill, slot::ping, 99).code() == status::unknown_sequence);
    }
    for (status s : {status::slice_out_of_range, status::bad_csr, status::missing_tensor, status::unknown_sequence})
        CHECK(fault_class_of(s) == fault_class::request);
    // None of these touched the device's health.
    CHECK(f.dev->status().state == device_state::ready);
}

TEST_CASE("KV accounting: allocate, apply, free, clear, can_allocate") {
    test::sim_fixture f;  // capacity 2 x 128 tokens in blocks of 16 = 16 blocks
    auto u = f.dev->kv();
    CHECK(u.blocks_total == 16);
    CHECK(u.capacity_tokens == 256);
    REQUIRE(f.dev->kv_allocate(1, 100).ok());  // 7 blocks
    CHECK(f.dev->kv().blocks_used == 7);
    CHECK(f.dev->kv_allocate(1, 1).code() == status::sequence_exists);
    CHECK(f.dev->kv_allocate(2, test::k_context + 1).code() == status::context_overflow);
    REQUIRE(f.dev->kv_allocate(2, 0).ok());
    REQUIRE(f.dev->kv_apply(2, 128, 1s).ok());  // 8 blocks
    CHECK(f.dev->kv().blocks_used == 15);
    CHECK(f.dev->kv_can_allocate(16));
    CHECK_FALSE(f.dev->kv_can_allocate(17));
    REQUIRE(f.dev->kv_allocate(3, 16).ok());  // the last block
    CHECK(f.dev->kv_apply(1, 128, 1s).code() == status::kv_full);
    CHECK(fault_class_of(status::kv_full) == fault_class::capacity);
    // An infer past the sequence's applied KV is refused before it reaches the device.
    std::vector<std::int32_t> seventeen(17, 1);
    CHECK(f.submit(k_prefill, slot::ping, 3, seventeen).code() == status::kv_full);
    REQUIRE(f.dev->kv_free(2).ok());
    CHECK(f.dev->kv().blocks_used == 8);
    CHECK(f.dev->kv_free(2).code() == status::unknown_sequence);
    REQUIRE(f.dev->kv_apply(1, 128, 1s).ok());
    REQUIRE(f.dev->kv_clear().ok());
    CHECK(f.dev->kv().blocks_used == 0);
    CHECK(f.dev->kv().sequences == 0);
}

TEST_CASE("a freed sequence id can be reused and starts from an empty history") {
    test::sim_fixture f;
    REQUIRE(f.dev->kv_allocate(5, 32).ok());
    auto j = f.submit(k_prefill, slot::ping, 5, {1, 2, 3});
    REQUIRE(f.dev->wait(*j, 1s).ok());
    REQUIRE(f.dev->kv_free(5).ok());
    CHECK(f.dev->kv_length(5) == 0);
    REQUIRE(f.dev->kv_allocate(5, 32).ok());
    j = f.submit(k_prefill, slot::pong, 5, {8});
    REQUIRE(f.dev->wait(*j, 1s).ok());
    CHECK(f.logits(k_prefill, slot::pong) == test::expected_logits({8}));
}

TEST_CASE("configure that does not fit fails cleanly with out_of_device_memory") {
    sim::manual_scheduler clock;
    sim::sim_options o;
    o.scheduler = &clock;
    o.dram_bytes_per_chip = 4u << 20;  // parameters alone need 8 MiB
    o.make_model = [](const package_spec& s) -> result<std::unique_ptr<model::causal_lm>> {
        return std::unique_ptr<model::causal_lm>(std::make_unique<test::history_lm>(s.vocab_size));
    };
    auto dev = sim::sim_device::create(o);
    REQUIRE(dev->load(test::tiny_spec()).ok());
    auto r = dev->configure();
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == status::out_of_device_memory);
    CHECK(fault_class_of(r.code()) == fault_class::capacity);
    CHECK(r.error().message.find("chip 0") != std::string::npos);
    CHECK(dev->status().state == device_state::loaded);
    // A package needing more chips than the board is refused at load.
    auto dev2 = sim::sim_device::create(o);
    CHECK(dev2->load(test::tiny_spec(3)).code() == status::unsupported);
}

TEST_CASE("configure reports per-chip memory and the modelled parameter upload") {
    test::sim_fixture f(-1, -1, test::tiny_spec(2));
    auto mem = f.dev->status().memory;
    REQUIRE(mem.size() == 2);
    CHECK(mem[0].dram_used > (8u << 20));
    CHECK(mem[1].sram_used == (1u << 20));
}

TEST_CASE("real-time mode: completions arrive from the simulator's own threads") {
    sim::realtime_scheduler clock;
    sim::sim_options o;
    o.scheduler = &clock;
    o.latency.step_ms = 1;
    o.latency.d2h_ms = 1;
    o.kv_block_tokens = 16;
    o.make_model = [](const package_spec& s) -> result<std::unique_ptr<model::causal_lm>> {
        return std::unique_ptr<model::causal_lm>(std::make_unique<test::history_lm>(s.vocab_size));
    };
    auto dev = sim::sim_device::create(o);
    REQUIRE(dev->load(test::tiny_spec()).ok());
    REQUIRE(dev->configure().ok());
    REQUIRE(dev->warmup().ok());
    REQUIRE(dev->kv_allocate(1, 16).ok());
    REQUIRE(dev->kv_allocate(2, 16).ok());
    std::mutex m;
    std::condition_variable cv;
    std::vector<job_id> done;
    auto submit = [&](slot s, seq_id seq, std::int32_t token) {
        const std::int32_t pos = 0;
        REQUIRE(dev->slice(k_prefill, s, 1).ok());
        REQUIRE(dev->write_input(k_prefill, s, "token", std::as_bytes(std::span(&token, 1))).ok());
        REQUIRE(dev->write_input(k_prefill, s, "position", std::as_bytes(std::span(&pos, 1))).ok());
        REQUIRE(dev->write_csr(k_prefill, s, "cur_seq_len", 1).ok());
        REQUIRE(dev->write_csr(k_prefill, s, "past_kv_cur_seq_len", 0).ok());
        auto j = dev->infer(k_prefill, s, seq);
        REQUIRE(j.ok());
        dev->wait_async(*j, 10s, [&, id = *j](result<job_result> r) {
            CHECK(r.ok());
            std::lock_guard l(m);
            done.push_back(id);
            cv.notify_all();
        });
        return *j;
    };
    const job_id a = submit(slot::ping, 1, 4);
    const job_id b = submit(slot::pong, 2, 6);
    std::unique_lock l(m);
    REQUIRE(cv.wait_for(l, 10s, [&] { return done.size() == 2; }));
    CHECK(done == std::vector<job_id>{a, b});
}

TEST_CASE("ping/pong in virtual time: two in flight keep compute busy, about 2x one in flight") {
    // step 10 ms + output copy 10 ms, no host time: in-flight 1 costs 20 ms a job, in-flight 2
    // hides every copy behind the other slot's compute.
    constexpr int k_jobs = 100;
    auto run = [](int inflight) {
        test::sim_fixture f(10.0, 10.0);
        REQUIRE(f.dev->kv_allocate(1, 128).ok());
        REQUIRE(f.dev->kv_allocate(2, 128).ok());
        std::deque<job_id> flight;
        const auto t0 = f.clock.now();
        for (int i = 0; i < k_jobs; ++i) {
            if (static_cast<int>(flight.size()) == inflight) {
                REQUIRE(f.dev->wait(flight.front(), 1s).ok());
                flight.pop_front();
            }
            const slot s = i % 2 == 0 ? slot::ping : slot::pong;
            auto j = f.submit(k_prefill, s, static_cast<seq_id>(1 + i % 2), {3});
            REQUIRE(j.ok());
            flight.push_back(*j);
        }
        for (job_id j : flight) REQUIRE(f.dev->wait(j, 1s).ok());
        const double wall = static_cast<double>((f.clock.now() - t0).count());
        return std::pair{wall, static_cast<double>(f.dev->compute_busy_ns()) / wall};
    };
    const auto [one, busy_one] = run(1);
    const auto [two, busy_two] = run(2);
    CHECK(one == Approx(k_jobs * 20e6));
    CHECK(two == Approx(k_jobs * 10e6 + 10e6));
    CHECK(one / two > 1.95);
    CHECK(busy_two > 0.98);
    CHECK(busy_one == Approx(0.5).epsilon(0.02));
}

TEST_CASE("a delivered job is freed at once, not when its wait timeout comes due") {
    test::sim_fixture f(1.0, 1.0);  // step 1 ms, d2h 1 ms
    REQUIRE(f.dev->kv_allocate(3, 32).ok());
    int delivered = 0;
    for (int i = 0; i < 8; ++i) {
        auto j = f.submit(i == 0 ? k_prefill : k_decode, slot::ping, 3, i == 0 ? std::vector<std::int32_t>{1, 2} : std::vector<std::int32_t>{5});
        REQUIRE(j.ok());
        f.dev->wait_async(*j, 10s, [&](result<job_result> r) {
            REQUIRE(r.ok());
            ++delivered;
        });
        f.clock.advance_by(5ms);  // the job completes; its 10 s timeout is still pending
        REQUIRE(delivered == i + 1);
        // Each job carried a vocabulary-sized logits buffer: holding delivered jobs until
        // their timeouts retained ~0.6 MB per generated token for wait_timeout_ms.
        CHECK(f.dev->jobs_alive() == 0);
    }
}

TEST_CASE("a job whose wait timed out is freed by the reset that follows") {
    test::sim_fixture f(50.0, 1.0);  // step 50 ms: the 5 ms wait gives up first
    REQUIRE(f.dev->kv_allocate(3, 32).ok());
    auto j = f.submit(k_prefill, slot::ping, 3, {1, 2});
    REQUIRE(j.ok());
    std::optional<status> outcome;
    f.dev->wait_async(*j, 5ms, [&](result<job_result> r) { outcome = r ? status::ok : r.code(); });
    f.clock.advance_by(10ms);
    REQUIRE(outcome == status::wait_timeout);
    CHECK(f.dev->jobs_alive() == 1);  // still computing on the device
    REQUIRE(f.dev->reset().ok());
    f.clock.advance_by(100ms);
    CHECK(f.dev->jobs_alive() == 0);
}

TEST_CASE("prefill_cost prices a prefill not yet submitted as the latency model will time it") {
    test::sim_fixture f(-1.0, -1.0);  // the latency model, no override
    const auto* model = f.dev->latency();
    REQUIRE(model);
    std::chrono::nanoseconds last{0};
    for (std::int64_t tokens : {1, 16, 64, 100}) {
        const auto cost = f.dev->prefill_cost(tokens, 20);
        INFO(tokens << " tokens");
        CHECK(cost.count() == std::llround(model->step(submodel_kind::prefill, tokens, 20).total_ms * 1e6));
        CHECK(cost > last);  // more tokens cost more: the chunk budget bisects on it
        last = cost;
    }
    CHECK(f.dev->prefill_cost(64, 60) >= f.dev->prefill_cost(64, 0));  // attention over a longer past
    CHECK(f.dev->prefill_cost(0, 0).count() == 0);
    // The modelled job computes for exactly the price.
    REQUIRE(f.dev->kv_allocate(1, 64).ok());
    const auto price = f.dev->prefill_cost(16, 0);
    auto job = f.submit(k_prefill, slot::ping, 1, std::vector<std::int32_t>(16, 3));
    REQUIRE(job.ok());
    std::optional<job_result> done;
    f.dev->wait_async(*job, 10s, [&](result<job_result> r) { REQUIRE(r.ok()); done = *r; });
    f.clock.run_until_idle();
    REQUIRE(done);
    CHECK(done->timing.compute_end_ns - done->timing.compute_start_ns == price.count());
}

TEST_CASE("prefill_cost under a fixed step time: every prefill costs the step, whatever its tokens") {
    test::sim_fixture f(10.0, 2.0);
    CHECK(f.dev->prefill_cost(1, 0) == 10ms);
    CHECK(f.dev->prefill_cost(100, 0) == 10ms);
    // Priced at nothing (the cpu backend's constants) in virtual time, where no host rate is
    // measured: the device cannot tell, and the chunk budget falls back to a token count.
    test::sim_fixture unpaced(0.0, 0.0);
    CHECK(unpaced.dev->prefill_cost(100, 0).count() == 0);
}
