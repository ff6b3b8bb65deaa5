// Batched decode jobs: infer_rows over B rows (padding included), per-row CSRs and
// validation, B x vocab logits with padding rows zero, faults matched by any live
// row, the batch latency model, and the cpu backend's decode profiles 1..N.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "config/config.hpp"
#include "device/sim/cpu_backend.hpp"
#include "model/weights/synthetic_model.hpp"
#include "sim_fixture.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;
using namespace calserve::device;
using namespace std::chrono_literals;
namespace dt = calserve::device::test;
using dt::k_batch;
using dt::k_decode;
using dt::k_decode_b4;
using dt::k_prefill;

namespace {
constexpr seq_id pad = k_padding_row;

struct batch_fixture : dt::sim_fixture {
    batch_fixture() : dt::sim_fixture(10, 2, dt::tiny_batched_spec()) {}

    // Prefills `seq` with `prompt` on ping and waits.
    void prefill(seq_id seq, const std::vector<std::int32_t>& prompt) {
        REQUIRE(dev->kv_allocate(seq, 64).ok());
        auto j = submit(k_prefill, slot::ping, seq, prompt);
        REQUIRE(j.ok());
        REQUIRE(dev->wait(*j, 1s).ok());
    }

    std::vector<std::byte> output_bytes(const char* sm, slot s) {
        auto out = dev->output(sm, s, "logits");
        REQUIRE(out.ok());
        return {out->begin(), out->end()};
    }
};

std::span<const std::byte> row_of(const std::vector<std::byte>& bytes, std::size_t row, std::size_t vocab) {
    return std::span(bytes).subspan(row * vocab * 2, vocab * 2);
}

bool all_zero(std::span<const std::byte> bytes) {
    return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

fault_spec on_sequence(fault_point p, seq_id seq) {
    fault_spec s;
    s.point = p;
    s.match.sequence = seq;
    return s;
}
}  // namespace

TEST_CASE("batched decode: every live row equals its sequence decoded alone, padding rows are zero", "[batch]") {
    batch_fixture f;
    const std::vector<std::vector<std::int32_t>> prompts{{3, 1, 4}, {1, 5}, {9, 2, 6, 5}};
    for (seq_id s = 0; s < 3; ++s) {
        f.prefill(10 + s, prompts[s]);  // batched
        f.prefill(20 + s, prompts[s]);  // twin, decoded alone
    }
    const std::vector<seq_id> rows{10, pad, 11, 12};
    const std::vector<std::int32_t> next{7, 0, 8, 63};
    auto j = f.submit_rows(k_decode_b4, slot::pong, rows, next);
    REQUIRE(j.ok());
    auto r = f.dev->wait(*j, 1s);
    REQUIRE(r.ok());
    CHECK(r->rows == rows);
    CHECK(r->sequence == 10);
    CHECK(r->tokens == 1);
    CHECK(r->kv_length == 4);
    for (seq_id s : {10u, 11u, 12u}) CHECK(f.dev->kv_length(s) == f.dev->kv_length(s + 10) + 1);
    const auto batched = f.output_bytes(k_decode_b4, slot::pong);
    REQUIRE(batched.size() == static_cast<std::size_t>(k_batch * dt::k_vocab * 2));
    CHECK(all_zero(row_of(batched, 1, dt::k_vocab)));
    for (std::size_t b : {0u, 2u, 3u}) {
        INFO("row " << b);
        auto alone = f.submit(k_decode, slot::ping, rows[b] + 10, {next[b]});
        REQUIRE(alone.ok());
        REQUIRE(f.dev->wait(*alone, 1s).ok());
        const auto single = f.output_bytes(k_decode, slot::ping);
        const auto row = row_of(batched, b, dt::k_vocab);
        CHECK(std::memcmp(row.data(), single.data(), single.size()) == 0);
    }
    CHECK(check_logits_bf16(batched).ok());
}

TEST_CASE("batched decode: rows are validated one by one, a refused job changes nothing", "[batch]") {
    batch_fixture f;
    f.prefill(1, {1, 2});
    f.prefill(2, {3});
    const auto write_rows = [&](std::vector<std::int32_t> tok, std::vector<std::int32_t> pos) {
        REQUIRE(f.dev->slice(k_decode_b4, slot::ping, 1).ok());
        REQUIRE(f.dev->write_input(k_decode_b4, slot::ping, "token", std::as_bytes(std::span(tok))).ok());
        REQUIRE(f.dev->write_input(k_decode_b4, slot::ping, "position", std::as_bytes(std::span(pos))).ok());
    };
    const auto csr = [&](std::int64_t row, std::uint32_t cur, std::uint32_t past) {
        REQUIRE(f.dev->write_csr_row(k_decode_b4, slot::ping, "cur_seq_len", row, cur).ok());
        REQUIRE(f.dev->write_csr_row(k_decode_b4, slot::ping, "past_kv_cur_seq_len", row, past).ok());
    };
    const std::vector<seq_id> rows{1, 2, pad, pad};
    SECTION("past_kv_cur_seq_len of row 1 disagrees with the tokens it holds") {
        write_rows({5, 6, 0, 0}, {2, 1, 0, 0});
        csr(0, 1, 2);
        csr(1, 1, 2);
        auto r = f.dev->infer_rows(k_decode_b4, slot::ping, rows);
        CHECK(r.code() == status::bad_csr);
        CHECK_THAT(r.error().what(), Catch::Contains("row 1"));
    }
    SECTION("a live row's CSRs not written") {
        write_rows({5, 6, 0, 0}, {2, 1, 0, 0});
        csr(0, 1, 2);
        CHECK(f.dev->infer_rows(k_decode_b4, slot::ping, rows).code() == status::bad_csr);
    }
    SECTION("cur_seq_len of a row is not the slice") {
        write_rows({5, 6, 0, 0}, {2, 1, 0, 0});
        csr(0, 1, 2);
        csr(1, 2, 1);
        CHECK(f.dev->infer_rows(k_decode_b4, slot::ping, rows).code() == status::bad_csr);
    }
    SECTION("a row's position does not continue its sequence") {
        write_rows({5, 6, 0, 0}, {2, 2, 0, 0});
        csr(0, 1, 2);
        csr(1, 1, 1);
        auto r = f.dev->infer_rows(k_decode_b4, slot::ping, rows);
        CHECK(r.code() == status::invalid_argument);
        CHECK_THAT(r.error().what(), Catch::Contains("row 1"));
    }
    SECTION("a row's token outside the vocabulary") {
        write_rows({5, static_cast<std::int32_t>(dt::k_vocab), 0, 0}, {2, 1, 0, 0});
        csr(0, 1, 2);
        csr(1, 1, 1);
        CHECK(f.dev->infer_rows(k_decode_b4, slot::ping, rows).code() == status::invalid_argument);
    }
    SECTION("a row whose sequence the device does not know") {
        write_rows({5, 6, 0, 0}, {2, 1, 0, 0});
        csr(0, 1, 2);
        csr(1, 1, 1);
        csr(2, 1, 0);
        CHECK(f.dev->infer_rows(k_decode_b4, slot::ping, std::vector<seq_id>{1, 2, 99, pad}).code() ==
              status::unknown_sequence);
    }
    SECTION("row count, all padding, a sequence twice, a CSR row outside the batch, infer on a batch program") {
        write_rows({5, 6, 0, 0}, {2, 1, 0, 0});
        csr(0, 1, 2);
        csr(1, 1, 1);
        CHECK(f.dev->infer_rows(k_decode_b4, slot::ping, std::vector<seq_id>{1, 2}).code() == status::invalid_argument);
        CHECK(f.dev->infer_rows(k_decode_b4, slot::ping, std::vector<seq_id>(4, pad)).code() == status::invalid_argument);
        CHECK(f.dev->infer_rows(k_decode_b4, slot::ping, std::vector<seq_id>{1, 1, pad, pad}).code() ==
              status::invalid_argument);
        CHECK(f.dev->write_csr_row(k_decode_b4, slot::ping, "cur_seq_len", k_batch, 1).code() == status::bad_csr);
        CHECK(f.dev->write_csr_row(k_decode, slot::ping, "cur_seq_len", 1, 1).code() == status::bad_csr);
        CHECK(f.dev->infer(k_decode_b4, slot::ping, 1).code() == status::invalid_argument);
        // Everything was refused before a job existed; the same inputs then run.
        CHECK(f.dev->infer_rows(k_decode_b4, slot::ping, rows).ok());
    }
    CHECK(f.dev->status().jobs_in_flight <= 1);
    if (f.dev->status().jobs_in_flight == 0) {
        CHECK(f.dev->kv_length(1) == 2);
        CHECK(f.dev->kv_length(2) == 1);
    }
}

TEST_CASE("batched decode: one modelled step whatever the batch, KV of a row kept until completion", "[batch]") {
    batch_fixture f;  // device.sim.step_ms = 10: a per-job constant
    f.prefill(1, {1});
    f.prefill(2, {2});
    auto j = f.submit_rows(k_decode_b4, slot::ping, {pad, 1, 2, pad}, {0, 4, 5, 0});
    REQUIRE(j.ok());
    CHECK(f.dev->kv_free(2).code() == status::invalid_argument);  // a row of a job in flight
    CHECK(f.dev->kv_length(2) == 2);
    auto r = f.dev->wait(*j, 1s);
    REQUIRE(r.ok());
    CHECK(r->sequence == 1);
    CHECK(r->timing.compute_end_ns - r->timing.compute_start_ns == 10'000'000);
    CHECK(f.dev->kv_free(2).ok());
}

TEST_CASE("batched decode: a fault matched on a sequence fires when any live row is it", "[batch][faults]") {
    batch_fixture f;
    f.prefill(1, {1});
    f.prefill(2, {2});
    f.prefill(3, {3});
    REQUIRE(f.dev->faults().arm(on_sequence(fault_point::submit_busy, 3)).ok());
    REQUIRE(f.dev->faults().arm(on_sequence(fault_point::logits_nan, 2)).ok());
    // Sequence 3 is not in this job: submit_busy stays armed.
    auto j = f.submit_rows(k_decode_b4, slot::ping, {1, pad, 2, pad}, {4, 0, 5, 0});
    REQUIRE(j.ok());
    REQUIRE(f.dev->wait(*j, 1s).ok());
    const auto out = f.output_bytes(k_decode_b4, slot::ping);
    CHECK(check_logits_bf16(row_of(out, 0, dt::k_vocab)).code() == status::logits_nan);  // every live row poisoned
    CHECK(check_logits_bf16(row_of(out, 2, dt::k_vocab)).code() == status::logits_nan);
    CHECK(all_zero(row_of(out, 1, dt::k_vocab)));
    CHECK(f.dev->faults().fires(fault_point::submit_busy) == 0);
    // Sequence 3 in the last row (not the first live one) fires it.
    CHECK(f.submit_rows(k_decode_b4, slot::ping, {1, 2, pad, 3}, {4, 5, 0, 6}).code() == status::submit_busy);
    CHECK(f.dev->faults().fires(fault_point::submit_busy) == 1);
    REQUIRE(f.dev->faults().arm(on_sequence(fault_point::ccu_exception, 3)).ok());
    j = f.submit_rows(k_decode_b4, slot::ping, {1, 2, pad, 3}, {4, 5, 0, 6});
    REQUIRE(j.ok());
    CHECK(f.dev->wait(*j, 1s).code() == status::ccu_exception);
    CHECK(f.dev->status().state == device_state::faulted);
}

TEST_CASE("latency model: a batch step reads the weights once, KV per live row, compute per row", "[batch]") {
    auto spec = dt::tiny_spec(2);
    spec.chips = {chip_memory{2'000'000'000, 0}, chip_memory{1'000'000'000, 0}};
    spec.hidden_size = 1000;
    sim::latency_model m(spec, sim::latency_constants{});
    const std::int64_t past = 99;
    const auto one = m.step(submodel_kind::decode, 1, past);
    const auto alone = m.decode_batch_step(std::span(&past, 1), 1);
    CHECK(alone.total_ms == one.total_ms);
    CHECK(alone.flops == one.flops);
    CHECK(one.flops > 0);
    const std::vector<std::int64_t> pasts(16, past);
    const auto b16 = m.decode_batch_step(pasts, 16);
    CHECK(b16.weight_bytes == one.weight_bytes);  // dense: read once for all rows
    CHECK(b16.kv_bytes == Approx(16 * one.kv_bytes));
    CHECK(b16.flops == Approx(16 * one.flops));
    CHECK(b16.syncs == one.syncs);
    CHECK(b16.d2d_bytes == Approx(16 * one.d2d_bytes));
    CHECK(b16.total_ms < 16 * one.total_ms);
    CHECK(b16.total_ms > one.total_ms);
    // Padding rows: computed (flops, d2d) but hold no KV.
    const auto padded = m.decode_batch_step(std::span(&past, 1), 16);
    CHECK(padded.kv_bytes == one.kv_bytes);
    CHECK(padded.flops > 15 * one.flops);
    CHECK(padded.total_ms < b16.total_ms);
    // MoE: 16 tokens touch more experts than one.
    spec.num_experts = 128;
    spec.experts_per_token = 8;
    spec.intermediate_size = 768;
    sim::latency_model moe(spec, sim::latency_constants{});
    CHECK(moe.decode_batch_step(pasts, 16).weight_bytes > moe.step(submodel_kind::decode, 1, past).weight_bytes);
    CHECK(moe.decode_batch_step(pasts, 16).weight_bytes < 16 * moe.step(submodel_kind::decode, 1, past).weight_bytes);
    // device.sim.cost_experts=all: priced as a dense model of the same bytes.
    sim::latency_constants all;
    all.all_experts = true;
    sim::latency_model dense_like(spec, all);
    const auto d1 = dense_like.step(submodel_kind::decode, 1, past);
    CHECK(dense_like.decode_batch_step(pasts, 16).weight_bytes == d1.weight_bytes);
    CHECK(d1.weight_bytes > moe.step(submodel_kind::decode, 1, past).weight_bytes);
    CHECK(d1.flops > moe.step(submodel_kind::decode, 1, past).flops);
    // device.sim.step_ms: one step regardless of the batch.
    sim::latency_constants fixed;
    fixed.step_ms = 10;
    sim::latency_model f(spec, fixed);
    CHECK(f.decode_batch_step(pasts, 16).total_ms == 10.0);
    CHECK(f.step(submodel_kind::decode, 1, past).total_ms == 10.0);
}

TEST_CASE("cpu backend: decode profiles 1..runtime.max_batch, a batched row equals the sequence alone", "[batch]") {
    const auto dir = calserve::test::scratch_dir("device-cpu-batch") / "model";
    REQUIRE(model::make_synthetic_model("tiny-dense", dir, 3, "bf16", {}).ok());
    sim::manual_scheduler clock;
    auto cfg = config::defaults();
    {
        auto dev = sim::open_cpu_device(dir, cfg, clock);  // max_batch 0: 16 profiles
        REQUIRE(dev.ok());
        std::vector<std::int64_t> batches;
        for (const auto& sm : (*dev)->package().submodels)
            if (sm.kind == submodel_kind::decode) batches.push_back(sm.batch);
        std::vector<std::int64_t> want(sim::k_cpu_default_max_batch);
        std::iota(want.begin(), want.end(), 1);
        CHECK(batches == want);
        CHECK((*dev)->package().first_of(submodel_kind::decode)->name == "cpu_decode");
    }
    REQUIRE(cfg.set("runtime.max_batch=3").ok());
    auto opened = sim::open_cpu_device(dir, cfg, clock);
    REQUIRE(opened.ok());
    auto& dev = **opened;
    CHECK(dev.submodel_names() == std::vector<std::string>{"cpu_prefill", "cpu_decode", "cpu_decode_b2", "cpu_decode_b3"});
    // Sequences 1..3 decode together on the batch-3 program, 11..13 alone: same bits.
    const auto vocab = static_cast<std::size_t>(dev.package().vocab_size);
    const auto run = [&](const char* sm, const std::vector<seq_id>& rows, const std::vector<std::int32_t>& toks) {
        const auto n = static_cast<std::int64_t>(toks.size() / rows.size());
        std::vector<std::int32_t> pos;
        for (auto s : rows)
            for (std::int64_t i = 0; i < n; ++i) pos.push_back(static_cast<std::int32_t>(dev.kv_length(s) + i));
        REQUIRE(dev.slice(sm, slot::ping, n).ok());
        REQUIRE(dev.write_input(sm, slot::ping, "token", std::as_bytes(std::span(toks))).ok());
        REQUIRE(dev.write_input(sm, slot::ping, "position", std::as_bytes(std::span(pos))).ok());
        for (std::size_t b = 0; b < rows.size(); ++b) {
            REQUIRE(dev.write_csr_row(sm, slot::ping, "cur_seq_len", static_cast<std::int64_t>(b), static_cast<std::uint32_t>(n)).ok());
            REQUIRE(dev.write_csr_row(sm, slot::ping, "past_kv_cur_seq_len", static_cast<std::int64_t>(b),
                                      static_cast<std::uint32_t>(dev.kv_length(rows[b]))).ok());
        }
        auto j = dev.infer_rows(sm, slot::ping, rows);
        REQUIRE(j.ok());
        REQUIRE(dev.wait(*j, 10s).ok());
        auto out = dev.output(sm, slot::ping, "logits");
        REQUIRE(out.ok());
        return std::vector<std::byte>(out->begin(), out->end());
    };
    for (seq_id s : {1u, 2u, 3u, 11u, 12u, 13u}) {
        REQUIRE(dev.kv_allocate(s, 64).ok());
        std::vector<std::int32_t> prompt{static_cast<std::int32_t>(s % 10), 7, static_cast<std::int32_t>(s % 10 * 3)};
        run("cpu_prefill", {s}, prompt);
    }
    const std::vector<std::int32_t> next{5, 17, 42};
    for (int step = 0; step < 3; ++step) {
        const auto batched = run("cpu_decode_b3", {1, 2, 3}, next);
        for (std::size_t b = 0; b < 3; ++b) {
            const auto single = run("cpu_decode", {11 + b}, {next[b]});
            INFO("step " << step << " row " << b);
            CHECK(std::memcmp(batched.data() + b * vocab * 2, single.data(), vocab * 2) == 0);
        }
    }
}
