// The sampler's token mask (constrained decoding): masked tokens are never drawn, on every
// path; bias, penalties and truncation act within the mask; greedy with a mask is the
// argmax over the allowed tokens; an all-masked step or a wrong-sized mask is an error.
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <random>
#include <set>

#include "model/sampling/sampling.hpp"

using namespace calserve;
using namespace calserve::model;

namespace {

std::vector<std::uint32_t> mask_of(std::size_t vocab, const std::set<std::int32_t>& allowed) {
    std::vector<std::uint32_t> m((vocab + 31) / 32, 0);
    for (const auto t : allowed) m[static_cast<std::size_t>(t) / 32] |= 1u << (t % 32);
    return m;
}

std::vector<float> random_logits(std::size_t n, std::uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> l(n);
    for (auto& x : l) x = normal(gen);
    return l;
}

}  // namespace

TEST_CASE("masked tokens are never drawn, whatever the parameters", "[sampling][mask]") {
    const std::size_t vocab = 1000;
    auto logits = random_logits(vocab, 7);
    logits[5] = 50.0f;  // the unmasked favourite is outside the mask
    const std::set<std::int32_t> allowed = {3, 64, 65, 999};
    const auto mask = mask_of(vocab, allowed);
    std::vector<sampling_params> mix(6);
    mix[0].temperature = 0.0f;                       // fused greedy
    mix[1].temperature = 0.0f, mix[1].logprobs = true;  // greedy through the pipeline
    mix[2].top_k = 2;
    mix[3].top_p = 0.5f;
    mix[4].min_p = 0.2f;
    mix[5].logit_bias = {{5, 100.0f}, {3, 5.0f}};
    std::vector<bf16> as_bf16(vocab);
    for (std::size_t i = 0; i < vocab; ++i) as_bf16[i] = f32_to_bf16(logits[i]);
    sampler smp;
    request_rng rng(9);
    for (const auto& sp : mix) {
        for (int draw = 0; draw < 50; ++draw) {
            auto r = smp.sample(std::span<const float>(logits), sp, {}, rng, mask);
            REQUIRE(r.ok());
            CHECK(allowed.count(r->token) == 1);
            auto rb = smp.sample(std::span<const bf16>(as_bf16), sp, {}, rng, mask);
            REQUIRE(rb.ok());
            CHECK(allowed.count(rb->token) == 1);
        }
    }
}

TEST_CASE("greedy with a mask is the argmax over the allowed tokens, lowest id on ties", "[sampling][mask]") {
    std::vector<float> logits = {9.0f, 1.0f, 4.0f, 4.0f, 8.0f, 4.0f};
    sampling_params greedy;
    greedy.temperature = 0.0f;
    sampler smp;
    request_rng rng(1);
    auto r = smp.sample(std::span<const float>(logits), greedy, {}, rng, mask_of(6, {1, 3, 5, 2}));
    REQUIRE(r.ok());
    CHECK(r->token == 2);
    sampling_params biased = greedy;
    biased.logit_bias = {{1, 10.0f}};
    r = smp.sample(std::span<const float>(logits), biased, {}, rng, mask_of(6, {1, 3}));
    REQUIRE(r.ok());
    CHECK(r->token == 1);  // bias acts within the mask
}

TEST_CASE("logprobs are renormalised over the allowed tokens", "[sampling][mask]") {
    std::vector<float> logits = {0.0f, 0.0f, 0.0f, 0.0f};
    sampling_params sp;
    sp.logprobs = true;
    sampler smp;
    request_rng rng(2);
    auto r = smp.sample(std::span<const float>(logits), sp, {}, rng, mask_of(4, {1, 2}));
    REQUIRE(r.ok());
    CHECK((r->token == 1 || r->token == 2));
    CHECK(r->logprob == Approx(std::log(0.5f)));
    CHECK(r->support == 2);
}

TEST_CASE("an empty mask or one of the wrong size is an error", "[sampling][mask]") {
    std::vector<float> logits(40, 0.0f);
    sampler smp;
    request_rng rng(3);
    sampling_params greedy;
    greedy.temperature = 0.0f;
    const std::vector<std::uint32_t> none(2, 0);
    CHECK(smp.sample(std::span<const float>(logits), greedy, {}, rng, none).code() == status::invalid_argument);
    CHECK(smp.sample(std::span<const float>(logits), sampling_params{}, {}, rng, none).code() ==
          status::invalid_argument);
    const std::vector<std::uint32_t> short_mask(1, ~0u);
    CHECK(smp.sample(std::span<const float>(logits), sampling_params{}, {}, rng, short_mask).code() ==
          status::invalid_argument);
}

TEST_CASE("greedy with a mask allocates nothing", "[sampling][mask][scratch]") {
    const std::size_t vocab = 151936;
    std::vector<bf16> logits(vocab);
    for (std::size_t i = 0; i < vocab; ++i) logits[i] = f32_to_bf16(static_cast<float>(i % 97));
    const auto mask = mask_of(vocab, {10, 20000, 151935});
    sampling_params greedy;
    greedy.temperature = 0.0f;
    sampler smp;
    request_rng rng(4);
    auto r = smp.sample(std::span<const bf16>(logits), greedy, {}, rng, mask);
    REQUIRE(r.ok());
    CHECK(r->token == 151935);  // logits 10, 18 and 33: the largest allowed one
    CHECK(smp.scratch_bytes() == 0);
}

TEST_CASE("greedy with a mostly full mask: dense runs and sparse words give the brute-force argmax",
          "[sampling][mask]") {
    const std::size_t vocab = 151936;  // the Qwen3 vocabulary; the last word is partial below
    for (std::uint32_t seed = 1; seed <= 6; ++seed) {
        std::mt19937 gen(seed);
        auto logits = random_logits(vocab, seed);
        std::vector<std::uint32_t> mask((vocab + 31) / 32, ~0u);
        for (int k = 0; k < 200; ++k) mask[gen() % mask.size()] &= ~(1u << (gen() % 32));  // sparse words in runs
        for (int k = 0; k < 20; ++k) mask[gen() % mask.size()] = 0;
        const auto best_unmasked = static_cast<std::size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        mask[best_unmasked / 32] &= ~(1u << (best_unmasked % 32));  // the overall best is masked out
        logits[77] = std::numeric_limits<float>::quiet_NaN();       // NaN inside a run is never chosen
        if (seed % 2) logits[vocab - 5] = 100.0f;                   // the best allowed sits in the tail
        std::int32_t want = -1;
        float want_value = -std::numeric_limits<float>::infinity();
        for (std::size_t i = 0; i < vocab; ++i) {
            if (!(mask[i / 32] >> (i % 32) & 1u) || !(logits[i] > want_value)) continue;
            want_value = logits[i];
            want = static_cast<std::int32_t>(i);
        }
        sampling_params p;
        p.temperature = 0.0f;
        request_rng rng(1);
        sampler s;
        auto got = s.sample(std::span<const float>(logits), p, {}, rng, mask);
        REQUIRE(got.ok());
        CHECK(got->token == want);
        std::vector<bf16> half(vocab);
        f32_to_bf16(logits, half);
        std::int32_t want16 = -1;
        float want16_value = -std::numeric_limits<float>::infinity();
        for (std::size_t i = 0; i < vocab; ++i) {
            const float v = bf16_to_f32(half[i]);
            if (!(mask[i / 32] >> (i % 32) & 1u) || !(v > want16_value)) continue;
            want16_value = v;
            want16 = static_cast<std::int32_t>(i);
        }
        auto got16 = s.sample(std::span<const bf16>(half), p, {}, rng, mask);
        REQUIRE(got16.ok());
        CHECK(got16->token == want16);
    }
}

TEST_CASE("greedy with a string-like mask (a few holes in every word) gives the brute-force argmax",
          "[sampling][mask]") {
    const std::size_t vocab = 151936;
    for (std::uint32_t seed = 1; seed <= 8; ++seed) {
        std::mt19937 gen(seed);
        auto logits = random_logits(vocab, seed + 100);
        std::vector<std::uint32_t> mask((vocab + 31) / 32, ~0u);
        for (auto& w : mask) {
            for (std::uint32_t k = 0, n = 1 + gen() % 4; k < n; ++k) w &= ~(1u << (gen() % 32));
        }
        for (int k = 0; k < 50; ++k) mask[gen() % mask.size()] = 1u << (gen() % 32);  // sparse words too
        const auto top = static_cast<std::size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        if (seed % 2) {
            mask[top / 32] &= ~(1u << (top % 32));  // the unmasked best is not allowed
        } else {
            mask[top / 32] |= 1u << (top % 32);  // it is: the answer at once
        }
        if (seed % 4 == 3) {  // a tie between two allowed ids in holed words: the lower one wins
            logits[4001] = logits[90001] = 1000.0f;
            mask[4001 / 32] |= 1u << (4001 % 32);
            mask[90001 / 32] |= 1u << (90001 % 32);
        }
        logits[130] = std::numeric_limits<float>::quiet_NaN();
        logits[131] = -std::numeric_limits<float>::infinity();
        for (const bool half : {false, true}) {
            std::vector<bf16> h(vocab);
            f32_to_bf16(logits, h);
            std::int32_t want = -1;
            float want_value = -std::numeric_limits<float>::infinity();
            for (std::size_t i = 0; i < vocab; ++i) {
                const float v = half ? bf16_to_f32(h[i]) : logits[i];
                if (!(mask[i / 32] >> (i % 32) & 1u) || !(v > want_value)) continue;
                want_value = v;
                want = static_cast<std::int32_t>(i);
            }
            sampling_params p;
            p.temperature = 0.0f;
            request_rng rng(1);
            sampler s;
            auto got = half ? s.sample(std::span<const bf16>(h), p, {}, rng, mask)
                            : s.sample(std::span<const float>(logits), p, {}, rng, mask);
            REQUIRE(got.ok());
            INFO("seed " << seed << " half " << half);
            CHECK(got->token == want);
        }
    }
}
