// Batch invariance: a decode_batch row's logits equal that sequence decoded alone,
// bit for bit (memcmp), whatever the batch size and the other rows; the kernels
// underneath sum every vector of a batch exactly as the single-vector matvec does. The
// S8 V-cache keeps it (a position's quantisation depends on its own value vector only).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <numeric>

#include "model/core/bf16.hpp"
#include "model/cpu/kernels.hpp"
#include "tests/model/transformer_fixture.hpp"

using namespace calserve;

namespace {

bool same_bits(const float* a, const float* b, std::size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// A weight matrix of `rows` x `cols` in `type`, filled with varied values.
struct test_matrix {
    std::vector<std::byte> bytes;
    model::tensor_view view;

    test_matrix(model::dtype type, std::int64_t rows, std::int64_t cols, unsigned seed) {
        const std::size_t es = type == model::dtype::f32 ? 4 : 2;
        bytes.resize(static_cast<std::size_t>(rows * cols) * es);
        std::mt19937 gen(seed);
        std::uniform_real_distribution<float> d(-1.0f, 1.0f);
        for (std::size_t i = 0; i < static_cast<std::size_t>(rows * cols); ++i) {
            const float v = d(gen);
            if (type == model::dtype::f32) {
                std::memcpy(bytes.data() + i * 4, &v, 4);
            } else {
                const std::uint16_t h = type == model::dtype::bf16 ? model::f32_to_bf16(v) : model::f32_to_f16(v);
                std::memcpy(bytes.data() + i * 2, &h, 2);
            }
        }
        view = {type, rows, cols, cols, bytes.data()};
    }
};

std::vector<float> random_floats(std::size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> d(-2.0f, 2.0f);
    std::vector<float> v(n);
    for (auto& f : v) f = d(gen);
    return v;
}

// Decodes `batch` sequences (ids[i]) together and their twins (ids[i] + 1000) one
// at a time with the same tokens; every row must match its twin exactly.
void check_batch_equals_alone(model::transformer& m, std::span<const model::seq_id> ids, unsigned seed) {
    const auto v = static_cast<std::size_t>(m.shape().vocab_size);
    const auto next = test::random_tokens(ids.size(), m.shape().vocab_size, seed);
    std::vector<float> batched(ids.size() * v), alone(v);
    REQUIRE(m.decode_batch(ids, next, batched).ok());
    for (std::size_t i = 0; i < ids.size(); ++i) {
        REQUIRE(m.decode(ids[i] + 1000, next[i], alone).ok());
        INFO("batch " << ids.size() << " row " << i);
        CHECK(same_bits(batched.data() + i * v, alone.data(), v));
    }
}

void check_model(bool moe, const std::string& dtype, int tp, model::arithmetic arith = model::arithmetic::fp32,
                 model::v_cache_dtype v_cache = model::v_cache_dtype::bf16) {
    INFO("moe " << moe << " dtype " << dtype << " tp " << tp << " arithmetic " << model::to_string(arith) << " V cache "
                << model::to_string(v_cache));
    auto dir = test::write_small_model(std::string("batch-exact-") + (moe ? "moe-" : "dense-") + dtype,
                                       test::small_config(moe), dtype);
    auto m = test::load_model(dir, tp, 2, arith, v_cache);
    const auto v = static_cast<std::size_t>(m->shape().vocab_size);
    constexpr std::size_t k_rows = 16;
    std::vector<float> scratch(v);
    std::vector<model::seq_id> all(k_rows);
    for (std::size_t i = 0; i < k_rows; ++i) {
        all[i] = 1 + i;
        const auto prompt = test::random_tokens(1 + 3 * i, m->shape().vocab_size, static_cast<unsigned>(40 + i));
        REQUIRE(m->prefill(all[i], prompt, scratch).ok());
        REQUIRE(m->prefill(all[i] + 1000, prompt, scratch).ok());
    }
    // Every batch size, each over a different window of the 16 sequences.
    for (std::size_t b = 1; b <= k_rows; ++b) {
        std::vector<model::seq_id> ids;
        for (std::size_t i = 0; i < b; ++i) ids.push_back(all[(5 * b + i) % k_rows]);
        check_batch_equals_alone(*m, ids, static_cast<unsigned>(b));
    }
}

}  // namespace

TEST_CASE("dot_rows_multi sums every vector exactly as dot_rows does", "[kernels][batch]") {
    for (auto type : {model::dtype::f32, model::dtype::bf16, model::dtype::f16}) {
        for (std::int64_t cols : {64, 1027, 3072}) {  // 1027: the 8-lane and scalar tails too
            INFO("dtype " << static_cast<int>(type) << " cols " << cols);
            test_matrix w(type, 37, cols, 5);
            for (std::int64_t nvec = 1; nvec <= 20; ++nvec) {
                const auto x = random_floats(static_cast<std::size_t>(nvec * cols), static_cast<unsigned>(nvec));
                std::vector<float> multi(static_cast<std::size_t>(nvec * w.view.rows)), one(static_cast<std::size_t>(w.view.rows));
                model::dot_rows_multi(w.view, 0, w.view.rows, x.data(), nvec, cols, multi.data(), w.view.rows);
                for (std::int64_t k = 0; k < nvec; ++k) {
                    model::dot_rows(w.view, 0, w.view.rows, x.data() + k * cols, one.data());
                    INFO("nvec " << nvec << " vector " << k);
                    CHECK(same_bits(multi.data() + k * w.view.rows, one.data(), one.size()));
                }
            }
        }
    }
}

TEST_CASE("the BF16 dot kernels' AVX-512 form gives the AVX2 form's bits", "[kernels][batch]") {
    if (!model::avx512_available()) {
        WARN("no AVX-512 on this CPU: both forms are the AVX2 one");
        return;
    }
    for (std::int64_t cols : {8, 31, 64, 1027, 3072}) {  // below one chunk, tails of 8 and of 1..7
        test_matrix w(model::dtype::bf16, 29, cols, 11);
        for (std::int64_t nvec = 1; nvec <= 9; ++nvec) {
            INFO("cols " << cols << " nvec " << nvec);
            const auto x = random_floats(static_cast<std::size_t>(nvec * cols), static_cast<unsigned>(100 + nvec));
            std::vector<float> fast(static_cast<std::size_t>(nvec * w.view.rows)), plain(fast.size());
            REQUIRE(model::bf16_dot_avx512());
            model::dot_rows_multi(w.view, 0, w.view.rows, x.data(), nvec, cols, fast.data(), w.view.rows);
            model::allow_bf16_dot_avx512(false);
            model::dot_rows_multi(w.view, 0, w.view.rows, x.data(), nvec, cols, plain.data(), w.view.rows);
            model::allow_bf16_dot_avx512(true);
            CHECK(same_bits(fast.data(), plain.data(), fast.size()));
        }
    }
}

TEST_CASE("dot_rows_multi: the register-blocked BF16 kernel over many vectors equals dot_rows", "[kernels][batch][exact]") {
    // 3 x 4 blocks, a row remainder (41 = 13 x 3 + 2), vector tiles (4,096 columns: 16 per L2 tile)
    // and balanced groups of 1-4, against each vector alone (the AVX2 form when AVX-512 is off).
    for (std::int64_t cols : {1027, 4096}) {
        test_matrix w(model::dtype::bf16, 41, cols, 21);
        for (std::int64_t nvec : {2, 5, 13, 37, 70}) {
            INFO("cols " << cols << " nvec " << nvec);
            const auto x = random_floats(static_cast<std::size_t>(nvec * cols), static_cast<unsigned>(300 + nvec));
            std::vector<float> multi(static_cast<std::size_t>(nvec * w.view.rows)), one(static_cast<std::size_t>(w.view.rows));
            model::dot_rows_multi(w.view, 0, w.view.rows, x.data(), nvec, cols, multi.data(), w.view.rows);
            model::allow_bf16_dot_avx512(false);
            for (std::int64_t k = 0; k < nvec; ++k) {
                model::dot_rows(w.view, 0, w.view.rows, x.data() + k * cols, one.data());
                CHECK(same_bits(multi.data() + k * w.view.rows, one.data(), one.size()));
            }
            model::allow_bf16_dot_avx512(true);
            // A sub-range of rows starting off a block boundary.
            std::vector<float> part(static_cast<std::size_t>(nvec * 30));
            model::dot_rows_multi(w.view, 7, 37, x.data(), nvec, cols, part.data(), 30);
            for (std::int64_t k = 0; k < nvec; ++k)
                CHECK(same_bits(part.data() + k * 30, multi.data() + k * w.view.rows + 7, 30));
        }
    }
}

TEST_CASE("linear in row_exact mode equals each row alone at any batch size", "[kernels][batch]") {
    model::thread_pool pool(2);
    test_matrix w(model::dtype::bf16, 300, 512, 9);
    for (std::int64_t t : {1, 2, 7, 16, 17, 40}) {
        const auto x = random_floats(static_cast<std::size_t>(t * 512), static_cast<unsigned>(t));
        std::vector<float> y(static_cast<std::size_t>(t * 300)), one(300);
        model::linear(pool, w.view, x.data(), t, 512, y.data(), 300, model::linear_mode::row_exact);
        for (std::int64_t i = 0; i < t; ++i) {
            model::linear(pool, w.view, x.data() + i * 512, 1, 512, one.data(), 300);
            INFO("t " << t << " row " << i);
            CHECK(same_bits(y.data() + i * 300, one.data(), 300));
        }
    }
}

TEST_CASE("dense: decode_batch rows equal decode alone bit for bit, batches 1..16", "[transformer][batch]") {
    check_model(false, "f32", 1);
    check_model(false, "bf16", 1);
}

TEST_CASE("moe: decode_batch rows equal decode alone bit for bit, batches 1..16", "[transformer][batch]") {
    check_model(true, "f32", 1);
    check_model(true, "bf16", 1);
}

TEST_CASE("tensor parallel 2: decode_batch rows equal decode alone bit for bit", "[transformer][batch]") {
    check_model(false, "bf16", 2);
    check_model(true, "bf16", 2);
}

TEST_CASE("bf16 arithmetic: decode_batch rows equal decode alone bit for bit", "[transformer][batch][bf16]") {
    check_model(false, "bf16", 1, model::arithmetic::bf16);
    check_model(true, "bf16", 1, model::arithmetic::bf16);
    check_model(false, "bf16", 2, model::arithmetic::bf16);
}

TEST_CASE("S8 V-cache: decode_batch rows equal decode alone bit for bit", "[transformer][batch][s8v]") {
    const auto s8 = model::v_cache_dtype::s8;
    check_model(false, "bf16", 1, model::arithmetic::fp32, s8);
    check_model(true, "f32", 1, model::arithmetic::fp32, s8);
    check_model(false, "bf16", 2, model::arithmetic::bf16, s8);
}

TEST_CASE("panel-packed short rows: every vector equals itself alone, and the plain dot up to rounding",
          "[kernels][batch]") {
    model::thread_pool pool(2);
    for (auto type : {model::dtype::f32, model::dtype::bf16, model::dtype::f16}) {
        for (std::int64_t rows : {1, 8, 37, 1000}) {  // 37, 1000: a partial last panel, several pool blocks
            const std::int64_t cols = 64;
            INFO("dtype " << static_cast<int>(type) << " rows " << rows);
            test_matrix w(type, rows, cols, 11);
            const auto packed = model::panel_matrix::pack(w.view);
            REQUIRE_FALSE(packed.empty());
            for (std::int64_t t : {1, 2, 5, 6, 7, 13, 16, 20}) {
                const auto x = random_floats(static_cast<std::size_t>(t * cols), static_cast<unsigned>(t + rows));
                // Canary past the last row: partial panels must not write beyond rows.
                std::vector<float> y(static_cast<std::size_t>(t * rows + 1), 42.0f), one(static_cast<std::size_t>(rows + 1), 42.0f);
                std::vector<float> plain(static_cast<std::size_t>(rows));
                model::linear_panels(pool, packed, x.data(), t, cols, y.data(), rows);
                CHECK(y.back() == 42.0f);
                for (std::int64_t i = 0; i < t; ++i) {
                    model::linear_panels(pool, packed, x.data() + i * cols, 1, cols, one.data(), rows);
                    INFO("t " << t << " vector " << i);
                    CHECK(same_bits(y.data() + i * rows, one.data(), static_cast<std::size_t>(rows)));
                    CHECK(one.back() == 42.0f);
                    model::dot_rows(w.view, 0, rows, x.data() + i * cols, plain.data());
                    for (std::int64_t r = 0; r < rows; ++r)
                        CHECK(std::abs(one[static_cast<std::size_t>(r)] - plain[static_cast<std::size_t>(r)]) < 1e-4f);
                }
            }
        }
    }
    test_matrix wide(model::dtype::bf16, 16, model::k_panel_max_cols + 1, 3);
    CHECK(model::panel_matrix::pack(wide.view).empty());
}
