// The sampling head of decode programs and token chaining on the simulated NPU
// (device/sampling_head.hpp): a drawn row is the host sampler's draw on the same BF16
// row, a chained job continues from the draw of the job in flight before it, and
// chains the device cannot honour are refused.
#include <catch2/catch.hpp>

#include <cstring>

#include "device/package_spec.hpp"
#include "device/sampling_head.hpp"
#include "model/sampling/sampling.hpp"
#include "sim_fixture.hpp"

using namespace calserve;
using namespace calserve::device;
using namespace std::chrono_literals;
namespace dt = calserve::device::test;
using dt::k_decode_b4;
using dt::k_prefill;
using dt::head_spec;

namespace {
constexpr seq_id pad = k_padding_row;

struct head_fixture : dt::sim_fixture {
    head_fixture() : dt::sim_fixture(10, 2, head_spec()) {}

    void prefill(seq_id seq, const std::vector<std::int32_t>& prompt) {
        REQUIRE(dev->kv_allocate(seq, 64).ok());
        auto j = submit(k_prefill, slot::ping, seq, prompt);
        REQUIRE(j.ok());
        REQUIRE(dev->wait(*j, 1s).ok());
    }

    // A decode step of b4 whose rows carry `head` (written before infer).
    result<job_id> step(slot s, const std::vector<seq_id>& rows, const std::vector<std::int32_t>& tokens,
                        const std::vector<head_row>& head) {
        std::vector<head_row> params(4);
        std::copy(head.begin(), head.end(), params.begin());
        if (auto r = dev->slice(k_decode_b4, s, 1); !r) return r.error();
        if (auto r = dev->write_input(k_decode_b4, s, k_head_params, std::as_bytes(std::span(params))); !r) return r.error();
        return submit_rows(k_decode_b4, s, rows, tokens);
    }

    template <typename T>
    std::vector<T> out(slot s, std::string_view name) {
        auto o = dev->output(k_decode_b4, s, name);
        REQUIRE(o.ok());
        std::vector<T> v(o->size() / sizeof(T));
        std::memcpy(v.data(), o->data(), v.size() * sizeof(T));
        return v;
    }

    std::vector<model::bf16> row_bf16(slot s, std::size_t row) {
        auto all = out<model::bf16>(s, "logits");
        return {all.begin() + std::ptrdiff_t(row * dt::k_vocab), all.begin() + std::ptrdiff_t((row + 1) * dt::k_vocab)};
    }
};

head_row sample_row(float temperature, float top_p, std::uint64_t seed) {
    head_row h;
    h.mode = std::uint32_t(head_mode::sample);
    h.temperature = temperature;
    h.top_p = top_p;
    model::request_rng rng(seed);
    std::copy(rng.state().begin(), rng.state().end(), h.rng);
    return h;
}

// The host's draw for `row` with the head row's parameters and an RNG in `state`.
std::int32_t host_draw(std::span<const model::bf16> row, const head_row& h, model::request_rng& rng) {
    model::sampler s;
    auto r = s.sample(row, params_of(h), {}, rng);
    REQUIRE(r.ok());
    return r->token;
}
}  // namespace

TEST_CASE("sampling head: each drawn row is the host sampler's draw on the same BF16 row", "[head]") {
    head_fixture f;
    f.prefill(1, {1, 2});
    f.prefill(2, {3});
    f.prefill(3, {4, 5, 6});
    const std::vector<head_row> head{sample_row(0.0f, 1.0f, 0), sample_row(0.8f, 0.9f, 42), head_row{}};
    auto j = f.step(slot::pong, {1, 2, 3, pad}, {7, 8, 9, 0}, head);
    REQUIRE(j.ok());
    REQUIRE(f.dev->wait(*j, 1s).ok());
    const auto drawn = f.out<std::int32_t>(slot::pong, k_head_sampled);
    const auto states = f.out<std::uint64_t>(slot::pong, k_head_rng);
    for (std::size_t r = 0; r < 2; ++r) {
        INFO("row " << r);
        model::request_rng rng;
        rng.restore({head[r].rng[0], head[r].rng[1], head[r].rng[2], head[r].rng[3]});
        CHECK(drawn[r] == host_draw(f.row_bf16(slot::pong, r), head[r], rng));
        CHECK(states[r * 4] == rng.state()[0]);  // the state after the draw comes back
        CHECK(states[r * 4 + 3] == rng.state()[3]);
    }
    CHECK(drawn[2] == -1);  // mode logits: the host samples it
    CHECK(drawn[3] == -1);  // padding
}

TEST_CASE("token chaining: a job chained to the one in flight continues from its draws", "[head]") {
    head_fixture f;
    f.prefill(1, {1, 2});
    f.prefill(2, {3});
    const std::vector<head_row> first{sample_row(0.0f, 1.0f, 0), sample_row(1.0f, 0.95f, 9)};
    auto a = f.step(slot::ping, {1, 2, pad, pad}, {7, 8, 0, 0}, first);
    REQUIRE(a.ok());
    // Submitted before job a is read: rows swapped, each takes its token and RNG state from a.
    std::vector<head_row> second{first[1], first[0]};
    second[0].chain_job = *a, second[0].chain_row = 1;
    second[1].chain_job = *a, second[1].chain_row = 0;
    auto b = f.step(slot::pong, {2, 1, pad, pad}, {0, 0, 0, 0}, second);
    REQUIRE(b.ok());
    REQUIRE(f.dev->wait(*a, 1s).ok());
    const auto drawn_a = f.out<std::int32_t>(slot::ping, k_head_sampled);
    const auto rng_a = f.out<std::uint64_t>(slot::ping, k_head_rng);
    REQUIRE(f.dev->wait(*b, 1s).ok());
    CHECK(f.dev->kv_length(1) == 4);
    CHECK(f.dev->kv_length(2) == 3);
    // b's logits are those of each history extended by a's draw.
    std::vector<float> want(dt::k_vocab);
    const std::vector<std::vector<std::int32_t>> histories{{3, 8, drawn_a[1]}, {1, 2, 7, drawn_a[0]}};
    for (std::size_t r = 0; r < 2; ++r) {
        INFO("row " << r);
        dt::history_lm::fill(histories[r], want);
        const auto got = f.row_bf16(slot::pong, r);
        for (std::size_t v = 0; v < want.size(); ++v) CHECK(got[v] == model::f32_to_bf16(want[v]));
    }
    // ... and b's draws continue a's RNG states.
    const auto drawn_b = f.out<std::int32_t>(slot::pong, k_head_sampled);
    for (std::size_t r = 0; r < 2; ++r) {
        const std::size_t src = r == 0 ? 1 : 0;
        model::request_rng rng;
        rng.restore({rng_a[src * 4], rng_a[src * 4 + 1], rng_a[src * 4 + 2], rng_a[src * 4 + 3]});
        CHECK(drawn_b[r] == host_draw(f.row_bf16(slot::pong, r), second[r], rng));
    }
}

TEST_CASE("token chaining: chains the device cannot honour are refused and change nothing", "[head]") {
    head_fixture f;
    f.prefill(1, {1, 2});
    f.prefill(2, {3});
    auto a = f.step(slot::ping, {1, 2, pad, pad}, {7, 8, 0, 0}, {sample_row(0, 1, 0), head_row{}});
    REQUIRE(a.ok());
    auto chained = sample_row(0, 1, 0);
    SECTION("an unknown job") {
        chained.chain_job = *a + 100, chained.chain_row = 0;
        CHECK(f.step(slot::pong, {1, pad, pad, pad}, {0, 0, 0, 0}, {chained}).code() == status::invalid_argument);
    }
    SECTION("a row of another sequence") {
        chained.chain_job = *a, chained.chain_row = 0;
        CHECK(f.step(slot::pong, {2, pad, pad, pad}, {0, 0, 0, 0}, {chained}).code() == status::invalid_argument);
    }
    SECTION("a source row the device did not draw") {
        chained.chain_job = *a, chained.chain_row = 1;
        CHECK(f.step(slot::pong, {2, pad, pad, pad}, {0, 0, 0, 0}, {chained}).code() == status::invalid_argument);
    }
    CHECK(f.dev->kv_length(1) == 3);
    CHECK(f.dev->kv_length(2) == 2);
    REQUIRE(f.dev->wait(*a, 1s).ok());
}

TEST_CASE("sampling head: top-k mode returns the k largest logits, their ids and log_z at the row's temperature",
          "[head]") {
    head_fixture f;
    f.prefill(1, {1, 2});
    f.prefill(2, {3, 4, 5});
    head_row greedy, hot;
    greedy.mode = hot.mode = std::uint32_t(head_mode::top_k);
    hot.temperature = 0.7f;
    hot.top_k = 5;
    auto j = f.step(slot::ping, {1, 2, pad, pad}, {5, 6, 0, 0}, {greedy, hot});
    REQUIRE(j.ok());
    REQUIRE(f.dev->wait(*j, 1s).ok());
    const auto ids = f.out<std::int32_t>(slot::ping, k_head_topk_ids);
    const auto vals = f.out<float>(slot::ping, k_head_topk_logits);
    const auto lse = f.out<double>(slot::ping, k_head_lse);
    REQUIRE(lse.size() == 4);
    for (std::size_t b = 0; b < 2; ++b) {
        const auto row = f.row_bf16(slot::ping, b);
        const double inv_t = b == 0 ? 1.0 : 1.0 / 0.7;
        double max = -1e30, sum = 0;
        for (auto v : row) max = std::max(max, double(model::bf16_to_f32(v)));
        for (auto v : row) sum += std::exp((double(model::bf16_to_f32(v)) - max) * inv_t);
        CHECK(lse[b] == Approx(std::log(sum)).epsilon(1e-5));  // log_z: the log-sum-exp at T, less max / T
        for (std::size_t i = 0; i < 8; ++i) {
            CHECK(vals[b * 8 + i] == model::bf16_to_f32(row[std::size_t(ids[b * 8 + i])]));
            if (i > 0) CHECK(vals[b * 8 + i] <= vals[b * 8 + i - 1]);
        }
        CHECK(vals[b * 8] == float(max));
        // The host sampler's own summary, bit for bit: what sample_top_k starts from.
        model::sampler s;
        model::sampling_params p = params_of(b == 0 ? greedy : hot);
        std::vector<float> want_vals(8);
        std::vector<std::int32_t> want_ids(8);
        auto want = s.summarise_top_k(row, p, want_vals, want_ids);
        REQUIRE(want.ok());
        CHECK(lse[b] == *want);
        CHECK(std::equal(want_ids.begin(), want_ids.end(), ids.begin() + std::ptrdiff_t(b * 8)));
    }
    // D2H: per top-k row K x 8 + 8 bytes (logits, ids, fp64 log_z).
    CHECK(head_row_d2h_bytes(head_mode::top_k, 8, 1000) == 72);
}

// Each chained job names the one before it; once a job has taken its source's draws it must
// not keep that job alive, or an unbroken chain of steps would hold every job it ever ran.
TEST_CASE("token chaining: a long chain of steps keeps only the recent jobs alive", "[head]") {
    head_fixture f;
    f.prefill(1, {1, 2});
    head_row h = sample_row(0.0f, 1.0f, 0);
    auto prev = f.step(slot::ping, {1, pad, pad, pad}, {7, 0, 0, 0}, {h});
    REQUIRE(prev.ok());
    std::int64_t most_alive = 0;
    for (int i = 1; i < 48; ++i) {  // 48 steps: the KV holds 64 tokens
        head_row c = h;
        c.chain_job = *prev, c.chain_row = 0;
        const slot s = i % 2 ? slot::pong : slot::ping;
        auto next = f.step(s, {1, pad, pad, pad}, {0, 0, 0, 0}, {c});
        INFO("step " << i << ": " << (next ? std::string() : next.error().what()));
        REQUIRE(next.ok());
        REQUIRE(f.dev->wait(*prev, 1s).ok());
        most_alive = std::max(most_alive, f.dev->jobs_alive());
        prev = next;
    }
    REQUIRE(f.dev->wait(*prev, 1s).ok());
    CHECK(f.dev->kv_length(1) == 2 + 48);
    CHECK(most_alive <= 8);  // the chain window (4) and the jobs in flight, not 48
}
