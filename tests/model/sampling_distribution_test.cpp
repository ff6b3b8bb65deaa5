// Empirical frequencies of the sampler against the exact distribution (chi-square at
// the 0.1% level with fixed seeds, so the verdict is deterministic), and determinism.
#include <catch2/catch.hpp>

#include <cmath>
#include <thread>

#include "sampling_reference.hpp"

using namespace calserve;
using namespace calserve::model;

namespace {

const std::vector<float> small_logits = {1.2f, -0.3f, 2.0f, 0.7f, 1.9f, -1.5f, 0.0f, 1.1f, 0.4f, -0.8f};

struct draw_setup {
    sampling_params params;
    std::vector<std::int32_t> prompt;
    std::vector<std::int32_t> generated;
};

std::vector<std::size_t> draw_counts(const std::vector<float>& logits, const draw_setup& s, std::size_t draws,
                                     std::uint64_t seed, simd_level level = detected_simd_level()) {
    sampler smp(level);
    request_rng rng(seed);
    std::vector<std::size_t> counts(logits.size(), 0);
    for (std::size_t i = 0; i < draws; ++i) {
        auto r = smp.sample(std::span<const float>(logits), s.params, {s.prompt, s.generated}, rng);
        REQUIRE(r.ok());
        ++counts[static_cast<std::size_t>(r->token)];
    }
    return counts;
}

void check_fit(const std::vector<float>& logits, const draw_setup& s, std::size_t draws, std::uint64_t seed) {
    const auto expected = test::reference_distribution(test::penalised(logits, s.params, s.prompt, s.generated), s.params);
    for (const auto level : {simd_level::scalar, simd_level::avx2}) {
        const auto counts = draw_counts(logits, s, draws, seed, level);
        const auto f = test::chi_square(counts, expected);
        INFO("chi2 " << f.statistic << " critical " << f.critical << " level " << static_cast<int>(level));
        CHECK(f.outside_support == 0);
        CHECK(f.statistic < f.critical);
    }
}

}  // namespace

TEST_CASE("plain temperature sampling matches softmax(l / T)", "[sampling][chi2]") {
    for (const float t : {1.0f, 0.7f, 1.8f}) {
        draw_setup s;
        s.params.temperature = t;
        check_fit(small_logits, s, 20000, 42);
    }
}

TEST_CASE("top-k sampling matches the renormalised k best", "[sampling][chi2]") {
    for (const int k : {1, 3, 5, 9}) {
        draw_setup s;
        s.params.top_k = k;
        s.params.temperature = 0.9f;
        check_fit(small_logits, s, 20000, 7 + static_cast<std::uint64_t>(k));
    }
}

TEST_CASE("top-p sampling matches the renormalised nucleus", "[sampling][chi2]") {
    for (const float p : {0.3f, 0.6f, 0.9f, 0.97f}) {
        draw_setup s;
        s.params.top_p = p;
        check_fit(small_logits, s, 20000, 11);
    }
}

TEST_CASE("min-p sampling matches the tokens above min_p * p_max", "[sampling][chi2]") {
    for (const float mp : {0.05f, 0.2f, 0.5f}) {
        draw_setup s;
        s.params.min_p = mp;
        s.params.temperature = 1.3f;
        check_fit(small_logits, s, 20000, 13);
    }
}

TEST_CASE("filters and penalties combined match the reference", "[sampling][chi2]") {
    draw_setup s;
    s.params.temperature = 0.8f;
    s.params.top_k = 7;
    s.params.top_p = 0.92f;
    s.params.min_p = 0.03f;
    s.params.repetition_penalty = 1.3f;
    s.params.frequency_penalty = 0.4f;
    s.params.presence_penalty = 0.2f;
    s.params.logit_bias = {{5, 2.5f}, {2, -0.5f}};
    s.prompt = {0, 1, 1, 8};
    s.generated = {2, 4, 4, 4, 9};
    check_fit(small_logits, s, 20000, 17);
}

TEST_CASE("full-vocabulary dense path matches the reference (151936 tokens)", "[sampling][chi2]") {
    // 12 live tokens spread over the vocabulary plus a tail of 151924 weak ones, which
    // are counted as one bucket: the weights, block sums and block walk all take part.
    const std::size_t vocab = 151936;
    const std::size_t live[] = {0, 7, 255, 256, 1000, 40000, 75968, 99999, 120001, 151000, 151934, 151935};
    std::vector<float> logits(vocab, -9.0f);
    for (std::size_t j = 0; j < std::size(live); ++j) logits[live[j]] = 0.25f * static_cast<float>(j % 6);
    const std::size_t draws = test::sanitized() ? 300 : 3000;
    for (const float p : {1.0f, 0.8f}) {
        draw_setup s;
        s.params.top_p = p;
        s.params.min_p = p < 1.0f ? 0.0f : 1e-6f;
        const auto exact = test::reference_distribution(test::penalised(logits, s.params, {}, {}), s.params);
        std::vector<double> expected;
        double tail = 0;
        for (std::size_t i = 0; i < vocab; ++i) tail += exact[i];
        for (const auto i : live) {
            expected.push_back(exact[i]);
            tail -= exact[i];
        }
        expected.push_back(std::max(tail, 0.0));
        const auto counts = draw_counts(logits, s, draws, 23);
        std::vector<std::size_t> grouped;
        std::size_t rest = draws;
        for (const auto i : live) {
            grouped.push_back(counts[i]);
            rest -= counts[i];
        }
        grouped.push_back(rest);
        const auto f = test::chi_square(grouped, expected);
        INFO("top_p " << p << " chi2 " << f.statistic << " critical " << f.critical);
        CHECK(f.outside_support == 0);
        CHECK(f.statistic < f.critical);
    }
}

TEST_CASE("same seed, same tokens, other seed, other tokens", "[sampling][determinism]") {
    std::vector<float> logits(5000);
    for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i) * 0.37f) * 3.0f;
    sampling_params sp;
    sp.temperature = 0.9f;
    sp.top_p = 0.95f;
    const auto run = [&](std::uint64_t seed) {
        sampler smp;
        request_rng rng(seed);
        std::vector<std::int32_t> generated;
        for (int step = 0; step < 64; ++step) {
            auto r = smp.sample(std::span<const float>(logits), sp, {{}, generated}, rng);
            REQUIRE(r.ok());
            generated.push_back(r->token);
        }
        return generated;
    };
    const auto a = run(1234);
    REQUIRE(run(1234) == a);
    REQUIRE(run(1235) != a);
    // Reproducible whatever the thread count: the state lives with the request.
    std::vector<std::int32_t> in_thread_a, in_thread_b;
    std::thread ta([&] { in_thread_a = run(1234); });
    std::thread tb([&] { in_thread_b = run(1234); });
    ta.join();
    tb.join();
    REQUIRE(in_thread_a == a);
    REQUIRE(in_thread_b == a);
}

TEST_CASE("request_rng: splitmix seeding, unit interval, save and restore", "[sampling][rng]") {
    request_rng a(0), b(0);
    REQUIRE(a.next_u64() == b.next_u64());
    const auto saved = a.state();
    const auto x = a.next_u64();
    b.restore(saved);
    REQUIRE(b.next_u64() == x);
    double sum = 0;
    for (int i = 0; i < 100000; ++i) {
        const double u = a.next_unit();
        REQUIRE(u >= 0.0);
        REQUIRE(u < 1.0);
        sum += u;
    }
    CHECK(std::fabs(sum / 100000 - 0.5) < 0.01);
    REQUIRE(request_rng::derive_seed(77, 5) == 77);
    REQUIRE(request_rng::derive_seed(std::nullopt, 5) != request_rng::derive_seed(std::nullopt, 6));
}
