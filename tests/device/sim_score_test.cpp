// Scoring prefills on the simulated NPU (docs/device.md "Scoring prefills"): a prefill that
// writes "score_request" returns, per position, the named token's logprob and the top N of
// that position's BF16 logits (the sampler's arithmetic), across chunks of one sequence;
// "logits" is the plain prefill's; a prefill that does not write it is a plain prefill; a
// bad request is refused, changes nothing and is not left behind for the next prefill.
#include <catch2/catch.hpp>

#include <cstring>

#include "device/package_spec.hpp"
#include "device/scoring.hpp"
#include "device/sim/latency_model.hpp"
#include "model/sampling/sampling.hpp"
#include "sim_fixture.hpp"

using namespace calserve;
using namespace calserve::device;
using namespace std::chrono_literals;
namespace dt = calserve::device::test;
using dt::k_prefill;

namespace {

package_spec scoring_spec() {
    auto p = dt::tiny_spec();
    for (auto& sm : p.submodels)
        if (sm.kind == submodel_kind::prefill) add_scoring(sm);
    return p;
}

struct score_fixture : dt::sim_fixture {
    score_fixture() : dt::sim_fixture(10, 2, scoring_spec()) {}

    // A prefill of `tokens` onto `seq` with (target, top-N) per token.
    result<job_id> submit_scored(seq_id seq, const std::vector<std::int32_t>& tokens,
                                 const std::vector<std::int32_t>& request) {
        const auto past = dev->kv_length(seq);
        REQUIRE(dev->kv_apply(seq, past + std::int64_t(tokens.size()), 1s).ok());
        std::vector<std::int32_t> pos(tokens.size());
        for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = std::int32_t(past + std::int64_t(i));
        REQUIRE(dev->slice(k_prefill, slot::ping, std::int64_t(tokens.size())).ok());
        REQUIRE(dev->write_input(k_prefill, slot::ping, "token", std::as_bytes(std::span(tokens))).ok());
        REQUIRE(dev->write_input(k_prefill, slot::ping, "position", std::as_bytes(std::span(pos))).ok());
        if (!request.empty())
            REQUIRE(dev->write_input(k_prefill, slot::ping, k_score_request, std::as_bytes(std::span(request))).ok());
        REQUIRE(dev->write_csr(k_prefill, slot::ping, "cur_seq_len", std::uint32_t(tokens.size())).ok());
        REQUIRE(dev->write_csr(k_prefill, slot::ping, "past_kv_cur_seq_len", std::uint32_t(past)).ok());
        return dev->infer(k_prefill, slot::ping, seq);
    }

    template <typename T>
    std::vector<T> read(std::string_view tensor, std::size_t n) {
        auto out = dev->output(k_prefill, slot::ping, tensor);
        REQUIRE(out.ok());
        std::vector<T> v(n);
        std::memcpy(v.data(), out->data(), n * sizeof(T));
        return v;
    }
};

// What position p of `history` scores: the sampler on the BF16 logits of history[0..p].
model::sample_result expected_score(const std::vector<std::int32_t>& history, std::size_t p, std::int32_t target,
                                    std::size_t top) {
    const auto l = dt::expected_logits({history.begin(), history.begin() + std::ptrdiff_t(p) + 1});
    std::vector<model::bf16> row(l.size());
    model::f32_to_bf16(l, row);
    model::sampler s;
    auto r = s.score(row, target, top);
    REQUIRE(r.ok());
    return *r;
}

}  // namespace

TEST_CASE("scoring prefill: every position's target logprob and top N, across two chunks", "[scoring]") {
    score_fixture f;
    REQUIRE(f.dev->kv_allocate(1, 16).ok());
    const std::vector<std::int32_t> prompt{3, 9, 27, 17, 40, 5, 11};
    const std::size_t top = 3;
    for (std::size_t at : {std::size_t(0), std::size_t(4)}) {  // chunks [0, 4) and [4, 7)
        const std::size_t end = at == 0 ? 4 : prompt.size();
        std::vector<std::int32_t> chunk(prompt.begin() + std::ptrdiff_t(at), prompt.begin() + std::ptrdiff_t(end));
        std::vector<std::int32_t> request;
        for (std::size_t p = at; p < end; ++p) {
            const bool last = p + 1 == prompt.size();
            request.push_back(last ? -1 : prompt[p + 1]);
            request.push_back(last ? 0 : std::int32_t(top));
        }
        auto job = f.submit_scored(1, chunk, request);
        REQUIRE(job.ok());
        REQUIRE(f.dev->wait(*job, 1s).ok());
        const auto n = chunk.size();
        const auto logprobs = f.read<float>(k_score_logprobs, n);
        const auto ids = f.read<std::int32_t>(k_score_top_ids, n * k_score_top_max);
        const auto tops = f.read<float>(k_score_top_logprobs, n * k_score_top_max);
        for (std::size_t i = 0; i < n; ++i) {
            const std::size_t p = at + i;
            INFO("position " << p);
            if (p + 1 == prompt.size()) {  // nothing asked at the prompt's last position
                CHECK(logprobs[i] == 0.0f);
                CHECK(ids[i * k_score_top_max] == -1);
                continue;
            }
            const auto want = expected_score(prompt, p, prompt[p + 1], top);
            CHECK(logprobs[i] == want.logprob);
            for (std::size_t t = 0; t < top; ++t) {
                CHECK(ids[i * k_score_top_max + t] == want.top[t].token);
                CHECK(tops[i * k_score_top_max + t] == want.top[t].logprob);
            }
            CHECK(ids[i * k_score_top_max + top] == -1);
        }
        // "logits" is the plain prefill's: the chunk's last position.
        CHECK(f.logits(k_prefill, slot::ping) ==
              dt::expected_logits({prompt.begin(), prompt.begin() + std::ptrdiff_t(end)}));
    }
    CHECK(f.dev->kv_length(1) == std::int64_t(prompt.size()));
}

TEST_CASE("scoring prefill: a bad score_request is refused and changes nothing", "[scoring]") {
    score_fixture f;
    REQUIRE(f.dev->kv_allocate(1, 16).ok());
    for (const auto& bad : {std::vector<std::int32_t>{64, 1, -1, 0}, std::vector<std::int32_t>{5, 21, -1, 0},
                            std::vector<std::int32_t>{-2, 0, -1, 0}}) {
        auto job = f.submit_scored(1, {3, 9}, bad);
        REQUIRE_FALSE(job.ok());
        CHECK(job.error().code == status::invalid_argument);
        CHECK(f.dev->kv_length(1) == 0);
    }
    auto plain = f.submit_scored(1, {3, 9}, {});  // not written: a plain prefill
    INFO((plain.ok() ? std::string() : plain.error().what()));
    REQUIRE(plain.ok());
    REQUIRE(f.dev->wait(*plain, 1s).ok());
    CHECK(f.logits(k_prefill, slot::ping) == dt::expected_logits({3, 9}));
}

TEST_CASE("latency model: a scoring prefill adds its positions' logits passes; step_ms replaces it", "[scoring]") {
    const auto spec = scoring_spec();
    sim::latency_model m(spec, sim::latency_constants{});
    // Each position's BF16 logits written once and read twice: 3 x 2 x vocab bytes at DRAM speed.
    const double one = 3.0 * 2.0 * double(spec.vocab_size) / (200.0 * 1e9) * 1e3;
    CHECK(m.score_ms(1) == Approx(one));
    CHECK(m.score_ms(64) == Approx(64 * one));
    CHECK(m.score_ms(0) == 0.0);
    sim::latency_constants fixed;
    fixed.step_ms = 3;
    CHECK(sim::latency_model(spec, fixed).score_ms(64) == 0.0);
    // The output copy: 4 B + 20 alternatives x 8 B per position.
    CHECK(score_position_d2h_bytes() == 164);
}
