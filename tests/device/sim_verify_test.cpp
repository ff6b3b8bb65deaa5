// Verify jobs of speculative decoding on the simulated NPU (docs/device.md "Verify jobs"):
// a row carrying d drafts computes its d + 1 positions in one job, the head draws each
// with the RNG state plain decoding has there and keeps the drafts that match, so the
// tokens, RNG states and KV after a verify (and kv_keep) are those of plain steps, greedy
// and seeded; verify rows share a batch with plain rows; bad verify jobs are refused.
#include <catch2/catch.hpp>

#include <cstring>

#include "device/package_spec.hpp"
#include "device/sampling_head.hpp"
#include "device/sim/latency_model.hpp"
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
constexpr auto k_width = static_cast<std::size_t>(k_verify_drafts_max);

head_row sample_row(float temperature, std::uint64_t seed) {
    head_row h;
    h.mode = std::uint32_t(head_mode::sample);
    h.temperature = temperature;
    h.top_p = 0.95f;
    model::request_rng rng(seed);
    std::copy(rng.state().begin(), rng.state().end(), h.rng);
    return h;
}

// One row of a step: its sequence, input token, head row and drafts.
struct row_in {
    seq_id seq = pad;
    std::int32_t token = 0;
    head_row head;
    std::vector<std::int32_t> drafts;
};

// What the head returned for a row.
struct row_out {
    std::int32_t sampled = -1;
    std::int32_t accepted = 0;
    std::array<std::uint64_t, 4> rng{};
};

struct verify_fixture : dt::sim_fixture {
    verify_fixture() : dt::sim_fixture(10, 2, head_spec()) {}

    void prefill(seq_id seq, const std::vector<std::int32_t>& prompt) {
        REQUIRE(dev->kv_allocate(seq, 64).ok());
        auto j = submit(k_prefill, slot::ping, seq, prompt);
        REQUIRE(j.ok());
        REQUIRE(dev->wait(*j, 1s).ok());
    }

    // The verify protocol on b4: slice 1, token/position as a decode step, drafts in
    // draft_tokens, cur_seq_len 1 + drafts per row, KV applied for every position.
    result<job_id> submit_step(slot s, const std::vector<row_in>& in, bool write_drafts = true) {
        std::vector<seq_id> rows(4, pad);
        std::vector<std::int32_t> tok(4, 0), pos(4, 0), drafts(4 * k_width, 0);
        std::vector<head_row> head(4);
        for (std::size_t b = 0; b < in.size(); ++b) {
            rows[b] = in[b].seq;
            tok[b] = in[b].token;
            pos[b] = std::int32_t(dev->kv_length(in[b].seq));
            head[b] = in[b].head;
            std::copy(in[b].drafts.begin(), in[b].drafts.end(), drafts.begin() + std::ptrdiff_t(b * k_width));
        }
        if (auto r = dev->slice(k_decode_b4, s, 1); !r) return r.error();
        if (auto r = dev->write_input(k_decode_b4, s, "token", std::as_bytes(std::span(tok))); !r) return r.error();
        if (auto r = dev->write_input(k_decode_b4, s, "position", std::as_bytes(std::span(pos))); !r) return r.error();
        if (auto r = dev->write_input(k_decode_b4, s, k_head_params, std::as_bytes(std::span(head))); !r) return r.error();
        if (write_drafts)
            if (auto r = dev->write_input(k_decode_b4, s, k_head_drafts, std::as_bytes(std::span(drafts))); !r) return r.error();
        for (std::size_t b = 0; b < in.size(); ++b) {
            const auto run = 1 + std::int64_t(in[b].drafts.size());
            if (auto r = dev->kv_apply(in[b].seq, pos[b] + run, 1s); !r) return r.error();
            if (auto r = dev->write_csr_row(k_decode_b4, s, "cur_seq_len", std::int64_t(b), std::uint32_t(run)); !r) return r.error();
            if (auto r = dev->write_csr_row(k_decode_b4, s, "past_kv_cur_seq_len", std::int64_t(b), std::uint32_t(pos[b])); !r)
                return r.error();
        }
        return dev->infer_rows(k_decode_b4, s, rows);
    }

    std::vector<row_out> step(slot s, const std::vector<row_in>& in) {
        auto j = submit_step(s, in);
        REQUIRE(j.ok());
        REQUIRE(dev->wait(*j, 1s).ok());
        const auto sampled = out<std::int32_t>(s, k_head_sampled);
        const auto accepted = out<std::int32_t>(s, k_head_accepted);
        const auto rng = out<std::uint64_t>(s, k_head_rng);
        std::vector<row_out> res(in.size());
        for (std::size_t b = 0; b < in.size(); ++b) {
            res[b].sampled = sampled[b];
            res[b].accepted = accepted[b];
            std::copy_n(rng.begin() + std::ptrdiff_t(b * 4), 4, res[b].rng.begin());
        }
        return res;
    }

    template <typename T>
    std::vector<T> out(slot s, std::string_view name) {
        auto o = dev->output(k_decode_b4, s, name);
        REQUIRE(o.ok());
        std::vector<T> v(o->size() / sizeof(T));
        std::memcpy(v.data(), o->data(), v.size() * sizeof(T));
        return v;
    }
};

// `n` plain steps of `seq` (one row, head draws), from `token` and `h`'s RNG state:
// the tokens drawn and the RNG state after each.
struct plain_path {
    std::vector<std::int32_t> tokens;
    std::vector<std::array<std::uint64_t, 4>> states;
};
plain_path decode_plain(verify_fixture& f, seq_id seq, std::int32_t token, head_row h, int n) {
    plain_path p;
    for (int i = 0; i < n; ++i) {
        const auto r = f.step(slot::pong, {row_in{seq, token, h, {}}});
        REQUIRE(r[0].sampled >= 0);
        CHECK(r[0].accepted == 0);
        p.tokens.push_back(r[0].sampled);
        p.states.push_back(r[0].rng);
        token = r[0].sampled;
        std::copy(r[0].rng.begin(), r[0].rng.end(), h.rng);
    }
    return p;
}

// Drafting along `plain` (drafts taken from it, with a wrong one at `wrong` when >= 0),
// kv_keep after each verify: the same tokens and RNG states as the plain path.
void check_verify_path(float temperature, std::uint64_t seed, int wrong_every) {
    INFO("temperature " << temperature << " seed " << seed << " wrong_every " << wrong_every);
    verify_fixture f;
    const std::vector<std::int32_t> prompt{3, 1, 4, 1, 5};
    f.prefill(1, prompt);
    f.prefill(2, prompt);
    const head_row h0 = sample_row(temperature, seed);
    const auto plain = decode_plain(f, 1, 9, h0, 24);
    std::vector<std::int32_t> got;
    head_row h = h0;
    std::int32_t token = 9;
    int verifies = 0;
    while (got.size() < 20) {
        const std::size_t at = got.size();
        std::vector<std::int32_t> drafts(plain.tokens.begin() + std::ptrdiff_t(at), plain.tokens.begin() + std::ptrdiff_t(at + 3));
        if (wrong_every > 0 && ++verifies % wrong_every == 0) drafts[1] = (drafts[1] + 1) % std::int32_t(dt::k_vocab);
        const auto held = f.dev->kv_length(2);
        const auto r = f.step(slot::ping, {row_in{2, token, h, drafts}});
        REQUIRE(r[0].sampled >= 0);
        REQUIRE(r[0].accepted <= 3);
        CHECK(f.dev->kv_length(2) == held + 4);  // every position computed ...
        for (int i = 0; i < r[0].accepted; ++i) got.push_back(drafts[std::size_t(i)]);
        got.push_back(r[0].sampled);
        REQUIRE(f.dev->kv_keep(2, held + 1 + r[0].accepted).ok());  // ... the rejected ones dropped
        CHECK(r[0].rng == plain.states[got.size() - 1]);  // the state plain decoding has after the same tokens
        token = r[0].sampled;
        std::copy(r[0].rng.begin(), r[0].rng.end(), h.rng);
    }
    got.resize(20);
    CHECK(got == std::vector<std::int32_t>(plain.tokens.begin(), plain.tokens.begin() + 20));
}
}  // namespace

TEST_CASE("verify job: drafting gives the tokens and RNG states of plain steps, greedy and seeded", "[verify]") {
    check_verify_path(0.0f, 0, 0);    // greedy, every draft right
    check_verify_path(0.0f, 0, 2);    // greedy, every other verify has a wrong draft
    check_verify_path(1.0f, 42, 0);   // seeded at temperature 1
    check_verify_path(0.7f, 7, 3);
}

TEST_CASE("verify job: the head stops at the first draw that differs from a draft", "[verify]") {
    verify_fixture f;
    f.prefill(1, {2, 7});
    f.prefill(2, {2, 7});
    const head_row greedy = sample_row(0.0f, 0);
    const auto plain = decode_plain(f, 1, 5, greedy, 4);
    std::vector<std::int32_t> drafts{plain.tokens[0], (plain.tokens[1] + 1) % 64, plain.tokens[2]};
    const auto r = f.step(slot::ping, {row_in{2, 5, greedy, drafts}});
    CHECK(r[0].accepted == 1);
    CHECK(r[0].sampled == plain.tokens[1]);  // the first differing draw is the plain step's token
}

TEST_CASE("verify job: verify rows and plain rows share a batch", "[verify]") {
    verify_fixture f;
    for (seq_id s : {1, 2, 3, 11, 12, 13}) f.prefill(s, {1, 2, std::int32_t(s % 10)});
    const head_row g = sample_row(0.0f, 0), t = sample_row(1.0f, 5);
    // Plain references, one sequence at a time.
    const auto p1 = decode_plain(f, 11, 4, g, 3);
    const auto p3 = decode_plain(f, 13, 6, t, 3);
    const auto p2 = decode_plain(f, 12, 8, t, 1);
    const auto r = f.step(slot::ping, {row_in{1, 4, g, {p1.tokens[0], p1.tokens[1]}}, row_in{2, 8, t, {}},
                                       row_in{3, 6, t, {p3.tokens[0], p3.tokens[1]}}});
    CHECK(r[0].accepted == 2);
    CHECK(r[0].sampled == p1.tokens[2]);
    CHECK(r[1].accepted == 0);
    CHECK(r[1].sampled == p2.tokens[0]);
    CHECK(r[1].rng == p2.states[0]);
    CHECK(r[2].accepted == 2);
    CHECK(r[2].sampled == p3.tokens[2]);
    CHECK(r[2].rng == p3.states[2]);
    CHECK(f.dev->kv_length(2) == 4);
    CHECK(f.dev->kv_length(3) == 6);
}

TEST_CASE("verify job: refused unless drawn on the device, within D drafts, with KV and drafts written", "[verify]") {
    verify_fixture f;
    f.prefill(1, {1, 2});
    const head_row g = sample_row(0.0f, 0);
    auto unwritten = f.submit_step(slot::ping, {row_in{1, 3, g, {4, 5}}}, false);  // before any job wrote drafts
    CHECK(unwritten.code() == status::missing_tensor);
    head_row logits_row;  // mode logits: the host would sample, nothing to verify against
    auto bad = f.submit_step(slot::ping, {row_in{1, 3, logits_row, {4, 5}}});
    CHECK(bad.code() == status::invalid_argument);
    CHECK(f.submit_step(slot::ping, {row_in{1, 3, g, std::vector<std::int32_t>(k_width + 1, 1)}}).code() == status::bad_csr);
    CHECK(f.submit_step(slot::ping, {row_in{1, 3, g, {4, 64}}}).code() == status::invalid_argument);
    CHECK(f.dev->kv_length(1) == 2);  // a refused job changes nothing
    auto ok = f.submit_step(slot::ping, {row_in{1, 3, g, {4, 5}}});
    REQUIRE(ok.ok());
    CHECK(f.dev->kv_free(1).code() == status::invalid_argument);  // a row of a job in flight
    REQUIRE(f.dev->wait(*ok, 1s).ok());
    CHECK(f.dev->kv_length(1) == 5);
}

TEST_CASE("verify job: a poisoned verify draws nothing (logits_nan)", "[verify]") {
    verify_fixture f;
    f.prefill(1, {1, 2});
    fault_spec nan;
    nan.point = fault_point::logits_nan;
    REQUIRE(f.dev->faults().arm(nan).ok());
    const auto r = f.step(slot::ping, {row_in{1, 3, sample_row(0.0f, 0), {4, 5}}});
    CHECK(r[0].sampled == -1);
}

TEST_CASE("latency model: a verify step reads the weights once", "[verify]") {
    auto spec = head_spec();
    sim::latency_model m(spec, sim::latency_constants{});
    const std::vector<std::int64_t> pasts{100};
    const auto one = m.decode_batch_step(pasts, 1);
    const std::vector<std::int64_t> runs{5};
    const auto verify = m.verify_batch_step(pasts, runs, 1);
    CHECK(verify.weight_bytes == one.weight_bytes);
    CHECK(verify.total_ms > one.total_ms);
    CHECK(verify.total_ms < 5 * one.total_ms);
    CHECK(verify.flops > 4 * one.flops);
    const std::vector<std::int64_t> plain_runs{1};
    CHECK(m.verify_batch_step(pasts, plain_runs, 1).total_ms == Approx(one.total_ms));
}
