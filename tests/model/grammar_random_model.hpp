#pragma once
// Shared by the grammar property tests: a seeded random "model" writing one completion
// under a grammar. Logits are random, tokens that close a JSON value or string get a
// bias (so documents end), EOS gets `eos_bias`, and the project's sampler draws within
// the matcher's mask (temperature 1; top-k 50 or top-p 0.9 for two seeds in three).
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "model/sampling/sampling.hpp"
#include "tests/model/grammar_fixture.hpp"

namespace calserve::test {

// The text when the grammar completed (terminated or EOS) within max_steps; fails the
// test when the mask is ever empty before the grammar ends.
inline std::optional<std::string> random_model_completion(const std::shared_ptr<const gr::compiled>& c,
                                                          const gr::vocabulary& v, std::uint64_t seed, int max_steps,
                                                          float eos_bias) {
    gr::matcher m(c);
    std::vector<std::uint32_t> mask(m.mask_words());
    std::vector<float> logits(v.size());
    std::mt19937_64 gen(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    model::sampler sampler;
    model::sampling_params p;
    p.temperature = 1.0f;
    if (seed % 3 == 0) p.top_k = 50;
    if (seed % 3 == 1) p.top_p = 0.9f;
    model::request_rng rng(seed);
    std::string text;
    for (int step = 0; step < max_steps; ++step) {
        if (m.terminated()) return text;
        m.fill_mask(mask);
        bool any = false;
        for (const auto w : mask) any = any || w != 0;
        if (!any) FAIL("empty mask after: " << text);
        for (std::size_t i = 0; i < logits.size(); ++i) {
            const auto id = static_cast<std::int32_t>(i);
            const bool closes = v.bytes(id).find_first_of("\"}],") != std::string_view::npos;
            logits[i] = 2.0f * normal(gen) + (closes ? 9.0f : 0.0f) + (v.is_eos(id) ? eos_bias : 0.0f);
        }
        auto r = sampler.sample(logits, p, {}, rng, mask);
        REQUIRE(r.ok());
        REQUIRE(m.accept(r->token));
        if (v.is_eos(r->token)) return text;
        text += v.bytes(r->token);
    }
    return std::nullopt;
}

}  // namespace calserve::test
