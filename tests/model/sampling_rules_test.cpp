// Exact rules of the sampler: top-p prefixes (table), min-p, greedy ties, penalties and
// logit_bias through the reported logprobs, BF16 input, radix cutoffs, errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include "model/sampling/kernels.hpp"
#include "model/sampling/select.hpp"
#include "sampling_reference.hpp"

using namespace calserve;
using namespace calserve::model;

namespace {

std::vector<float> logits_of(const std::vector<double>& probs) {
    std::vector<float> l;
    for (const double p : probs) l.push_back(static_cast<float>(std::log(p)));
    return l;
}

struct outcome {
    std::size_t support = 0;
    std::set<std::int32_t> drawn;
};

outcome run(const std::vector<float>& logits, const sampling_params& sp, int draws = 400, std::uint64_t seed = 3,
            simd_level level = detected_simd_level()) {
    sampler smp(level);
    request_rng rng(seed);
    outcome o;
    for (int i = 0; i < draws; ++i) {
        auto r = smp.sample(std::span<const float>(logits), sp, {}, rng);
        REQUIRE(r.ok());
        o.support = r->support;
        o.drawn.insert(r->token);
    }
    return o;
}

}  // namespace

TEST_CASE("top-p keeps the smallest prefix whose mass reaches p", "[sampling][top_p]") {
    struct row {
        std::vector<double> probs;
        float top_p;
        int top_k;
        std::set<std::int32_t> kept;
    };
    const std::vector<row> table = {
        {{0.5, 0.3, 0.2}, 0.5f, 0, {0}},
        {{0.5, 0.3, 0.2}, 1e-7f, 0, {0}},  // below the slack: still the best token only
        {{0.5, 0.3, 0.2}, 1e-7f, 2, {0}},
        {{0.5, 0.3, 0.2}, 0.79f, 0, {0, 1}},
        {{0.5, 0.3, 0.2}, 0.8f, 0, {0, 1}},  // exactly reached: no spill to a third token
        {{0.5, 0.3, 0.2}, 0.81f, 0, {0, 1, 2}},
        {{0.5, 0.3, 0.2}, 1.0f, 0, {0, 1, 2}},
        {{0.1, 0.6, 0.3}, 0.65f, 0, {1, 2}},
        {{0.25, 0.25, 0.25, 0.25}, 0.5f, 0, {0, 1}},  // ties: lower ids first
        {{0.2, 0.2, 0.2, 0.2, 0.2}, 0.3f, 0, {0, 1}},
        {{0.4, 0.3, 0.2, 0.1}, 0.5f, 2, {0}},  // top-k first: {4/7, 3/7}
        {{0.4, 0.3, 0.2, 0.1}, 0.6f, 2, {0, 1}},
        {{0.05, 0.05, 0.7, 0.2}, 0.69f, 0, {2}},
        {{0.05, 0.05, 0.7, 0.2}, 0.91f, 0, {0, 2, 3}},
    };
    for (const row& r : table) {
        sampling_params sp;
        sp.top_p = r.top_p;
        sp.top_k = r.top_k;
        const auto o = run(logits_of(r.probs), sp);
        INFO("top_p " << r.top_p << " top_k " << r.top_k << " first prob " << r.probs[0]);
        CHECK(o.support == r.kept.size());
        CHECK(o.drawn == r.kept);
    }
}

TEST_CASE("min-p keeps tokens with p >= min_p * p_max", "[sampling][min_p]") {
    const auto logits = logits_of({0.5, 0.25, 0.15, 0.1});
    for (const auto& [mp, kept] : std::vector<std::pair<float, std::set<std::int32_t>>>{
             {0.1f, {0, 1, 2, 3}}, {0.29f, {0, 1, 2}}, {0.35f, {0, 1}}, {0.9f, {0}}, {1.0f, {0}}}) {
        sampling_params sp;
        sp.min_p = mp;
        const auto o = run(logits, sp);
        INFO("min_p " << mp);
        CHECK(o.support == kept.size());
        CHECK(o.drawn == kept);
    }
}

TEST_CASE("greedy picks the lowest index among ties, on every path", "[sampling][greedy]") {
    const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 3.0f, 2.9f};
    std::vector<bf16> as_bf16(logits.size());
    f32_to_bf16(logits, as_bf16);
    sampler smp;
    request_rng rng(1);
    const auto before = rng.state();
    sampling_params sp;
    sp.temperature = 0.0f;
    REQUIRE(smp.sample(std::span<const float>(logits), sp, {}, rng)->token == 1);
    REQUIRE(smp.sample(std::span<const bf16>(as_bf16), sp, {}, rng)->token == 1);
    sp.logprobs = true;  // the non-fused path
    REQUIRE(smp.sample(std::span<const float>(logits), sp, {}, rng)->token == 1);
    sp.logit_bias = {{1, -0.5f}};  // now 3 and 4 tie: 3 wins
    REQUIRE(smp.sample(std::span<const bf16>(as_bf16), sp, {}, rng)->token == 3);
    REQUIRE(rng.state() == before);  // greedy draws nothing
}

TEST_CASE("penalties and logit_bias are exact (seen through the logprobs)", "[sampling][penalties]") {
    const std::vector<float> logits = {1.0f, -1.0f, 2.0f, 0.5f, -0.5f, 3.0f, 0.0f, 1.5f};
    sampling_params sp;
    sp.temperature = 0.0f;
    sp.logprobs = true;
    sp.top_logprobs = 8;
    sp.logit_bias = {{3, 2.0f}, {6, -100.0f}};
    sp.repetition_penalty = 1.5f;
    sp.frequency_penalty = 0.25f;
    sp.presence_penalty = 0.5f;
    const std::vector<std::int32_t> prompt = {0, 1, 1};
    const std::vector<std::int32_t> generated = {2, 2, 4};
    // By hand: 0: 1/1.5; 1: -1*1.5; 2: 2/1.5 - 2*0.25 - 0.5; 3: 0.5+2; 4: -0.5*1.5 - 0.25 - 0.5;
    // 5: 3; 6: -100; 7: 1.5.
    const std::vector<double> expected_l = {1.0 / 1.5, -1.5, 2.0 / 1.5 - 1.0, 2.5, -1.5, 3.0, -100.0, 1.5};
    const auto reference_l = test::penalised(logits, sp, prompt, generated);
    for (std::size_t i = 0; i < expected_l.size(); ++i) REQUIRE(reference_l[i] == Approx(expected_l[i]));
    double z = 0;
    for (const double l : expected_l) z += std::exp(l - 3.0);
    const double log_z = std::log(z) + 3.0;
    sampler smp;
    request_rng rng(5);
    auto r = smp.sample(std::span<const float>(logits), sp, {prompt, generated}, rng);
    REQUIRE(r.ok());
    REQUIRE(r->token == 5);
    CHECK(r->logprob == Approx(3.0 - log_z).margin(1e-5));
    REQUIRE(r->top_count == 8);
    const std::int32_t order[] = {5, 3, 7, 0, 2, 1, 4, 6};  // 1 and 4 tie at -1.5: lower id first
    for (std::size_t j = 0; j < 8; ++j) {
        CHECK(r->top[j].token == order[j]);
        CHECK(r->top[j].logprob == Approx(expected_l[static_cast<std::size_t>(order[j])] - log_z).margin(1e-4));
    }
    // The same state must be left clean: a step without history sees the raw logits.
    sampling_params plain;
    plain.temperature = 0.0f;
    plain.top_logprobs = 2;
    auto clean = smp.sample(std::span<const float>(logits), plain, {}, rng);
    REQUIRE(clean->top[1].token == 2);
}

TEST_CASE("logprobs follow the temperature-scaled distribution before truncation", "[sampling][logprobs]") {
    const std::vector<float> logits = {0.3f, 1.7f, -0.4f, 1.1f};
    sampling_params sp;
    sp.temperature = 0.5f;
    sp.top_k = 2;
    sp.logprobs = true;
    sp.top_logprobs = 3;
    double z = 0;
    for (const float l : logits) z += std::exp(static_cast<double>(l) / 0.5);
    sampler smp;
    request_rng rng(8);
    for (int i = 0; i < 50; ++i) {
        auto r = smp.sample(std::span<const float>(logits), sp, {}, rng);
        REQUIRE(r.ok());
        REQUIRE((r->token == 1 || r->token == 3));
        CHECK(r->logprob == Approx(logits[static_cast<std::size_t>(r->token)] / 0.5 - std::log(z)).margin(1e-5));
        REQUIRE(r->top_count == 3);
        CHECK(r->top[2].token == 0);
        CHECK(r->top[2].logprob == Approx(0.3 / 0.5 - std::log(z)).margin(1e-5));
    }
}

TEST_CASE("BF16 input samples exactly like its FP32 conversion", "[sampling][bf16]") {
    std::mt19937 gen(4);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<bf16> raw(3000);
    for (auto& x : raw) x = f32_to_bf16(normal(gen));
    std::vector<float> converted(raw.size());
    bf16_to_f32(raw, converted);
    sampling_params sp;
    sp.temperature = 0.8f;
    sp.top_p = 0.9f;
    sp.repetition_penalty = 1.1f;
    const std::vector<std::int32_t> generated = {5, 6, 7};
    sampler a, b;
    request_rng ra(77), rb(77);
    for (int i = 0; i < 100; ++i) {
        const auto x = a.sample(std::span<const bf16>(raw), sp, {{}, generated}, ra);
        const auto y = b.sample(std::span<const float>(converted), sp, {{}, generated}, rb);
        REQUIRE(x->token == y->token);
    }
}

TEST_CASE("radix cutoff: large flat nucleus and ties cut by token id", "[sampling][radix]") {
    const std::size_t vocab = 30000;
    std::vector<float> logits(vocab);
    for (std::size_t i = 0; i < vocab; ++i) logits[i] = 0.1f * static_cast<float>(i % 7);
    sampling_params sp;
    sp.top_p = 0.5f;
    const auto expected = test::reference_distribution(test::penalised(logits, sp, {}, {}), sp);
    std::size_t expected_support = 0;
    for (const double p : expected) expected_support += p > 0 ? 1 : 0;
    REQUIRE(expected_support > select::keep_all(0).index + 4096);  // past the candidate lists: radix
    for (const auto level : {simd_level::scalar, simd_level::avx2}) {
        const auto o = run(logits, sp, 300, 3, level);
        CHECK(o.support == expected_support);
        // Boundary-value tokens are kept by lowest id: any token drawn must be inside the cut.
        for (const auto t : o.drawn) REQUIRE(expected[static_cast<std::size_t>(t)] > 0);
    }
    // Large top-k goes through the count cutoff: exactly k tokens stay.
    sampling_params k_big;
    k_big.top_k = 10000;
    CHECK(run(logits, k_big, 50).support == 10000);
}

TEST_CASE("radix_cutoff finds the prefix by mass and by count", "[sampling][radix]") {
    std::vector<float> w = {0.5f, 0.25f, 0.25f, 1.0f, 0.125f, 0.25f};
    select::radix_scratch scratch;
    // order: 3 (1.0), 0 (0.5), 1, 2, 5 (0.25 each), 4
    auto c = select::radix_cutoff(w, 1.5, select::measure::mass, scratch);
    CHECK(c.index == 0);
    c = select::radix_cutoff(w, 1.6, select::measure::mass, scratch);
    CHECK(c.index == 1);
    c = select::radix_cutoff(w, 2.0, select::measure::mass, scratch);
    CHECK(c.index == 2);
    c = select::radix_cutoff(w, 4.0, select::measure::count, scratch);
    CHECK((c.weight == 0.25f && c.index == 2));
    c = select::radix_cutoff(w, 99.0, select::measure::mass, scratch);
    CHECK(c.index == w.size());  // keep all
}

TEST_CASE("invalid parameters, ids and logits are errors, not crashes", "[sampling][errors]") {
    std::vector<float> logits = {0.0f, 1.0f, 2.0f};
    sampler smp;
    request_rng rng(1);
    const auto code = [&](const sampling_params& sp, token_history h = {}) {
        return smp.sample(std::span<const float>(logits), sp, h, rng).code();
    };
    sampling_params sp;
    sp.temperature = -1.0f;
    CHECK(code(sp) == status::invalid_argument);
    sp = {};
    sp.top_p = 0.0f;
    CHECK(code(sp) == status::invalid_argument);
    sp = {};
    sp.top_logprobs = 21;
    CHECK(code(sp) == status::invalid_argument);
    sp = {};
    sp.logit_bias = {{3, 1.0f}};
    CHECK(code(sp) == status::invalid_argument);
    sp = {};
    const std::vector<std::int32_t> bad_history = {0, 9};
    CHECK(code(sp, {{}, bad_history}) == status::invalid_argument);
    sp.logit_bias = {{0, -INFINITY}, {1, -INFINITY}, {2, -INFINITY}};
    CHECK(code(sp) == status::invalid_argument);  // everything masked
    sp = {};
    logits[1] = NAN;
    CHECK(code(sp) == status::logits_nan);
    CHECK(smp.sample(std::span<const float>{}, sp, {}, rng).code() == status::invalid_argument);
}

TEST_CASE("after warm-up a step allocates nothing (scratch capacity is stable)", "[sampling][scratch]") {
    const std::size_t vocab = 151936;
    std::vector<bf16> logits(vocab);
    std::mt19937 gen(12);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (auto& x : logits) x = f32_to_bf16(normal(gen));
    std::vector<sampling_params> mix(5);
    mix[0].top_k = 50;
    mix[1].top_p = 0.9f;
    mix[1].logprobs = true;
    mix[1].top_logprobs = 5;
    mix[2].temperature = 0.0f;
    mix[2].repetition_penalty = 1.2f;
    mix[3].min_p = 0.05f;
    mix[3].frequency_penalty = 0.5f;
    mix[3].logit_bias = {{3, 4.0f}};
    mix[4].temperature = 0.8f;  // the direct BF16 top-p path
    mix[4].top_p = 0.95f;
    std::vector<std::int32_t> generated;
    sampler smp;
    request_rng rng(6);
    const auto step = [&](const sampling_params& sp) {
        auto r = smp.sample(std::span<const bf16>(logits), sp, {{}, generated}, rng);
        REQUIRE(r.ok());
        generated.push_back(r->token);
    };
    for (const auto& sp : mix) step(sp);
    const std::size_t warmed = smp.scratch_bytes();
    const int rounds = test::sanitized() ? 2 : 6;
    for (int i = 0; i < rounds; ++i) {
        for (const auto& sp : mix) step(sp);
    }
    CHECK(smp.scratch_bytes() == warmed);
}

TEST_CASE("exp weights: AVX2 polynomial within 4e-7 of the scalar expf, exact 1 at the max", "[sampling][kernels]") {
    std::vector<float> logits;
    for (int i = 0; i <= 200000; ++i) logits.push_back(-87.0f * static_cast<float>(i) / 200000.0f);
    logits.push_back(-std::numeric_limits<float>::infinity());
    logits.push_back(-100.0f);  // below the smallest normal result: 0
    std::vector<float> wa(logits.size()), ws(logits.size());
    std::vector<float> ba(kernels::block_count(logits.size())), bs(ba.size());
    const auto sa = kernels::exp_weights(logits, 0.0f, 1.0f, wa, ba, simd_level::avx2);
    const auto ss = kernels::exp_weights(logits, 0.0f, 1.0f, ws, bs, simd_level::scalar);
    double worst = 0;
    for (std::size_t i = 0; i + 2 < logits.size(); ++i) {
        worst = std::max(worst, std::fabs(static_cast<double>(wa[i]) - ws[i]) / ws[i]);
    }
    CHECK(worst < 4e-7);
    CHECK(wa[0] == 1.0f);
    CHECK(wa[logits.size() - 2] == 0.0f);
    CHECK(wa[logits.size() - 1] == 0.0f);
    CHECK(sa.total == Approx(ss.total).epsilon(1e-6));
    CHECK(sa.positive == logits.size() - 2);
}

namespace {

// BF16 rows that take every branch of the direct top-p path: peaked, flat, masked
// tokens (-inf: the clamped exp), a wide range (clamped too), heavy ties, a short
// row with a partial last block.
std::vector<std::vector<bf16>> bf16_rows() {
    std::vector<std::vector<bf16>> rows;
    for (int kind = 0; kind < 6; ++kind) {
        std::mt19937 gen(static_cast<unsigned>(40 + kind));
        std::normal_distribution<float> normal(0.0f, kind == 1 ? 0.5f : 2.0f);
        std::vector<bf16> row(kind == 5 ? 1037 : 151936);
        for (auto& x : row) x = f32_to_bf16(normal(gen) * (kind == 3 ? 30.0f : 1.0f));
        if (kind == 0 || kind == 2) {
            for (int j = 0; j < 8; ++j) row[gen() % row.size()] = f32_to_bf16(12.0f + static_cast<float>(j));
        }
        if (kind == 2) {
            for (int j = 0; j < 300; ++j) row[gen() % row.size()] = f32_to_bf16(-INFINITY);
        }
        if (kind == 4) {
            for (auto& x : row) x = f32_to_bf16(std::round(bf16_to_f32(x)));
        }
        rows.push_back(std::move(row));
    }
    return rows;
}

}  // namespace

TEST_CASE("BF16 top-p reads the row directly and samples exactly like the FP32 path", "[sampling][bf16]") {
    std::vector<sampling_params> mix;
    for (const float t : {0.8f, 0.3f, 1e-7f}) {
        for (const float p : {0.95f, 0.5f, 0.999f}) {
            sampling_params sp;
            sp.temperature = t;
            sp.top_p = p;
            sp.min_p = p == 0.5f ? 0.05f : 0.0f;
            mix.push_back(sp);
        }
    }
    const int draws = test::sanitized() ? 2 : 4;
    for (const auto& raw : bf16_rows()) {
        std::vector<float> converted(raw.size());
        bf16_to_f32(raw, converted);
        for (const auto level : {simd_level::scalar, simd_level::avx2}) {
            sampler a(level), b(level);
            for (const auto& sp : mix) {
                request_rng ra(91), rb(91);
                for (int i = 0; i < draws; ++i) {
                    const auto x = a.sample(std::span<const bf16>(raw), sp, {}, ra);
                    const auto y = b.sample(std::span<const float>(converted), sp, {}, rb);
                    REQUIRE((x.ok() && y.ok()));
                    INFO("T " << sp.temperature << " p " << sp.top_p << " level " << static_cast<int>(level));
                    REQUIRE(x->token == y->token);
                    REQUIRE(x->support == y->support);
                }
            }
        }
    }
}

TEST_CASE("BF16 kernels equal the FP32 kernels bit for bit (AVX2, AVX-512, scalar)", "[sampling][kernels][bf16]") {
    for (const auto& raw : bf16_rows()) {
        const std::size_t n = raw.size();
        std::vector<float> converted(n);
        bf16_to_f32(raw, converted);
        std::vector<std::int16_t> keys(kernels::block_count(n));
        for (const auto level : {simd_level::scalar, simd_level::avx2}) {
            const auto f = kernels::scan_max(converted, level);
            const auto s = kernels::scan_max_bf16(raw, keys, level);
            REQUIRE(s.finite == f.finite);
            REQUIRE(s.max == f.max);
            REQUIRE(s.min == *std::min_element(converted.begin(), converted.end()));
            for (std::size_t b = 0; b < keys.size(); ++b) {
                std::int16_t best = std::numeric_limits<std::int16_t>::min();
                for (std::size_t i = b * kernels::weight_block; i < std::min(n, (b + 1) * kernels::weight_block); ++i) {
                    best = std::max(best, kernels::bf16_order_key(raw[i]));
                }
                REQUIRE(keys[b] == best);
            }
            // Thresholds from the row itself, as select_top passes them; the block skip
            // must never jump over a token above the threshold.
            for (const std::size_t probe : {std::size_t{0}, n / 3, n - 1}) {
                const float t = converted[probe];
                for (const std::size_t from : {std::size_t{0}, std::size_t{5}, n / 2}) {
                    std::size_t expected = from;
                    while (expected < n && !(converted[expected] > t)) ++expected;
                    REQUIRE(kernels::next_above_bf16(raw, keys, from, t, level) == expected);
                    REQUIRE(kernels::next_above(converted, from, t, level) == expected);
                }
            }
            for (const float t : {0.8f, 0.05f, 1e-7f}) {
                const float inv_t = 1.0f / t;
                std::vector<float> wf(n), bf(keys.size());
                const auto ref = kernels::exp_weights(converted, f.max, inv_t, wf, bf, level);
                for (const bool wide : {false, true}) {
                    std::vector<float> wb(n), bb(keys.size());
                    const auto got = kernels::exp_weights_bf16(raw, s.max, s.min, inv_t, wb, bb, level, wide);
                    INFO("T " << t << " level " << static_cast<int>(level) << " avx512 " << wide);
                    REQUIRE(got.total == ref.total);
                    REQUIRE(std::memcmp(wb.data(), wf.data(), n * sizeof(float)) == 0);
                    REQUIRE(std::memcmp(bb.data(), bf.data(), bb.size() * sizeof(float)) == 0);
                }
            }
        }
    }
}
