// Sampling from a row's top k (the sampling head's mode top_k): whenever
// top_k_determines holds, summarise_top_k on the device side and sample_top_k on the
// host side give what the sampler gives on the whole row: the same token, the same RNG
// use, and the same logprob and top_logprobs bit for bit.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "model/sampling/sampling.hpp"

using namespace calserve;
using namespace calserve::model;

namespace {

// A random BF16 row: wide or peaked logits, sometimes coarse (many ties), sometimes with
// -inf entries (fewer finite tokens than k).
std::vector<bf16> random_row(std::mt19937_64& g, std::size_t vocab) {
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    const float scale = 1.0f + 15.0f * unit(g);
    const bool coarse = unit(g) < 0.3f;
    const bool holes = unit(g) < 0.15f;
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<bf16> row(vocab);
    for (auto& v : row) {
        float x = normal(g);
        if (coarse) x = std::round(x);
        if (holes && unit(g) < 0.97f) x = -std::numeric_limits<float>::infinity();
        v = f32_to_bf16(x);
    }
    if (holes) row[std::size_t(g() % vocab)] = f32_to_bf16(1.0f);  // at least one finite token
    return row;
}

sampling_params random_params(std::mt19937_64& g, std::size_t k) {
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    sampling_params p;
    const float kind = unit(g);
    p.temperature = kind < 0.3f ? 0.0f : kind < 0.35f ? 1e-30f : 0.05f + 2.0f * unit(g);
    p.top_k = 1 + int(g() % k);
    if (unit(g) < 0.4f) p.top_p = 0.05f + 0.95f * unit(g);
    if (unit(g) < 0.3f) p.min_p = 0.3f * unit(g);
    p.logprobs = unit(g) < 0.8f;
    p.top_logprobs = int(g() % (std::min<std::size_t>(k, max_top_logprobs) + 1));
    return p;
}

std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }

}  // namespace

TEST_CASE("top-k row: token, RNG use and logprobs equal whole-row sampling, bit for bit", "[sampling][top_k]") {
    std::mt19937_64 g(29);
    sampler whole, device, host;
    int greedy = 0, drawn = 0, padded = 0;
    for (int i = 0; i < 3000; ++i) {
        const std::size_t vocab = 40 + g() % 3000;
        const std::size_t k = std::min<std::size_t>(vocab - 1, 1 + g() % 64);
        const auto row = random_row(g, vocab);
        const auto params = random_params(g, k);
        INFO("case " << i << " vocab " << vocab << " k " << k << " T " << params.temperature << " top_k " << params.top_k
                     << " top_p " << params.top_p << " min_p " << params.min_p << " top_logprobs "
                     << params.top_logprobs);
        REQUIRE(top_k_determines(params, k, vocab));
        const std::uint64_t seed = g();
        request_rng rng_whole(seed), rng_top(seed);
        const auto want = whole.sample(std::span<const bf16>(row), params, {}, rng_whole);
        REQUIRE(want.ok());

        std::vector<float> top_logits(k);
        std::vector<std::int32_t> top_ids(k);
        const auto log_z = device.summarise_top_k(row, params, top_logits, top_ids);
        REQUIRE(log_z.ok());
        padded += top_ids.back() < 0 ? 1 : 0;
        const auto got = host.sample_top_k({top_logits, top_ids, *log_z}, params, vocab, rng_top);
        REQUIRE(got.ok());

        CHECK(got->token == want->token);
        CHECK(rng_top.state() == rng_whole.state());  // one next_u64 when drawn, none when greedy
        if (params.logprobs) CHECK(bits(got->logprob) == bits(want->logprob));
        REQUIRE(got->top_count == want->top_count);
        for (std::size_t j = 0; j < want->top_count; ++j) {
            CHECK(got->top[j].token == want->top[j].token);
            CHECK(bits(got->top[j].logprob) == bits(want->top[j].logprob));
        }
        (params.greedy() ? greedy : drawn) += 1;
    }
    CHECK(greedy > 500);
    CHECK(drawn > 1500);
    CHECK(padded > 50);
}

TEST_CASE("top-k row: what the top k cannot determine is refused", "[sampling][top_k]") {
    constexpr std::size_t vocab = 1000, k = 16;
    sampling_params p;
    p.temperature = 0.0f;
    p.top_logprobs = 5;
    CHECK(top_k_determines(p, k, vocab));
    p.top_logprobs = 17;
    CHECK_FALSE(top_k_determines(p, k, vocab));  // more logprobs than the head returns
    p.top_logprobs = 5;
    p.temperature = 0.8f;
    CHECK_FALSE(top_k_determines(p, k, vocab));  // top-k off: the draw needs the whole row
    p.top_k = 17;
    CHECK_FALSE(top_k_determines(p, k, vocab));
    p.top_k = 16;
    CHECK(top_k_determines(p, k, vocab));
    p.top_p = 0.5f, p.min_p = 0.1f;
    CHECK(top_k_determines(p, k, vocab));  // cut within the top-k candidates
    CHECK_FALSE(top_k_determines(p, k, 16));  // a top-k of the whole vocabulary is no cut
    p.repetition_penalty = 1.1f;
    CHECK_FALSE(top_k_determines(p, k, vocab));
    p.repetition_penalty = 1.0f;
    p.logit_bias = {{3, 1.0f}};
    CHECK_FALSE(top_k_determines(p, k, vocab));
    p.logit_bias.clear();
    p.presence_penalty = 0.5f;
    CHECK_FALSE(top_k_determines(p, k, vocab));

    sampler s;
    request_rng rng(1);
    std::vector<float> logits{2.0f, 1.0f};
    std::vector<std::int32_t> ids{4, 7};
    sampling_params wide;
    wide.temperature = 1.0f;  // top-k off
    CHECK(s.sample_top_k({logits, ids, 0.5}, wide, vocab, rng).code() == status::invalid_argument);
    CHECK(rng.state() == request_rng(1).state());
    sampling_params greedy;
    greedy.temperature = 0.0f;
    greedy.logprobs = true;
    CHECK(s.sample_top_k({logits, ids, std::nan("")}, greedy, vocab, rng).code() == status::logits_nan);
    std::vector<std::int32_t> none{-1, -1};
    CHECK(s.sample_top_k({logits, none, 0.5}, greedy, vocab, rng).code() == status::logits_nan);
    std::vector<bf16> bad_row(vocab, f32_to_bf16(0.0f));
    bad_row[3] = f32_to_bf16(std::numeric_limits<float>::quiet_NaN());
    std::vector<float> out_logits(k);
    std::vector<std::int32_t> out_ids(k);
    CHECK(s.summarise_top_k(bad_row, greedy, out_logits, out_ids).code() == status::logits_nan);
}
