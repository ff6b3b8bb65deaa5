// Synthetic checkpoints (determinism, presets, conditioning) and the threaded kernels.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <set>

#include "model/cpu/kernels.hpp"
#include "model/core/bf16.hpp"
#include "tests/model/transformer_fixture.hpp"

using namespace calserve;

namespace {
std::string read_all(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::filesystem::path tokenizer_or_empty() {
    auto dir = test::tokenizer_dir();
    return std::filesystem::exists(dir / "tokenizer.json") ? dir : std::filesystem::path{};
}
}  // namespace

TEST_CASE("make_synthetic_model: same seed gives identical bytes, another seed differs") {
    auto a = test::scratch_dir("syn-a"), b = test::scratch_dir("syn-b"), c = test::scratch_dir("syn-c");
    REQUIRE(model::make_synthetic_model("tiny-moe", a, 42, "bf16", {}).ok());
    REQUIRE(model::make_synthetic_model("tiny-moe", b, 42, "bf16", {}).ok());
    REQUIRE(model::make_synthetic_model("tiny-moe", c, 43, "bf16", {}).ok());
    CHECK(read_all(a / "model.safetensors") == read_all(b / "model.safetensors"));
    CHECK(read_all(a / "config.json") == read_all(b / "config.json"));
    CHECK(read_all(a / "model.safetensors") != read_all(c / "model.safetensors"));
    CHECK_FALSE(model::make_synthetic_model("huge", a, 1, "bf16", {}).ok());
    CHECK(model::make_synthetic_model("tiny-dense", a, 1, "int8", {}).code() == status::invalid_argument);
}

TEST_CASE("presets have the documented shapes") {
    auto names = model::synthetic_model_presets();
    CHECK(names == std::vector<std::string>{"tiny-dense", "tiny-moe", "micro-dense", "qwen3-0.6b-shape"});
    auto big = model::synthetic_preset("qwen3-0.6b-shape");
    REQUIRE(big.ok());
    const auto& c = big->config;
    CHECK(c.num_hidden_layers == 28);
    CHECK(c.hidden_size == 1024);
    CHECK(c.num_attention_heads == 16);
    CHECK(c.num_key_value_heads == 8);
    CHECK(c.head_dim == 128);
    CHECK(c.intermediate_size == 3072);
    CHECK(c.tie_word_embeddings);
    CHECK(c.vocab_size == 151936);
    auto moe = model::synthetic_preset("tiny-moe");
    CHECK(moe->config.num_experts == 8);
    CHECK(moe->config.num_experts_per_tok == 2);
    CHECK(moe->config.moe_intermediate_size == 64);
    CHECK(moe->config.max_position_embeddings == 40960);
}

TEST_CASE("tiny presets load, give finite logits of sensible size, and greedy decoding moves on") {
    for (const char* preset : {"tiny-dense", "tiny-moe"}) {
        INFO(preset);
        auto dir = test::scratch_dir("syn-load");
        auto tok = tokenizer_or_empty();
        REQUIRE(model::make_synthetic_model(preset, dir, 1, "bf16", tok).ok());
        if (!tok.empty()) CHECK(std::filesystem::exists(dir / "tokenizer_config.json"));
        model::load_options o;
        auto lm = model::load_causal_lm(dir, o);
        REQUIRE(lm.ok());
        auto& m = **lm;
        CHECK(m.shape().vocab_size == 151936);
        const auto v = static_cast<std::size_t>(m.shape().vocab_size);
        std::vector<float> logits(v);
        std::vector<model::token_id> prompt{9707, 11, 1879, 0};  // arbitrary ids
        REQUIRE(m.prefill(1, prompt, logits).ok());
        std::vector<model::token_id> generated;
        for (int step = 0; step < 24; ++step) {
            double sum = 0, sq = 0;
            std::size_t bad = 0;
            for (float x : logits) {
                bad += std::isfinite(x) ? 0 : 1;
                sum += x, sq += double(x) * x;
            }
            REQUIRE(bad == 0);
            const double sd = std::sqrt(sq / v - (sum / v) * (sum / v));
            CHECK(sd > 0.5);
            CHECK(sd < 20.0);
            auto next = static_cast<model::token_id>(std::max_element(logits.begin(), logits.end()) - logits.begin());
            generated.push_back(next);
            REQUIRE(m.decode(1, next, logits).ok());
        }
        std::set<model::token_id> distinct(generated.begin(), generated.end());
        CHECK(distinct.size() >= 6);
    }
}

TEST_CASE("threaded linear matches a naive product for every dtype and batch size") {
    model::thread_pool pool(2);
    const std::int64_t rows = 300, cols = 260;
    std::mt19937 gen(2);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> w(rows * cols);
    for (auto& e : w) e = u(gen);
    for (model::dtype type : {model::dtype::f32, model::dtype::bf16, model::dtype::f16}) {
        std::vector<std::byte> bytes(w.size() * model::dtype_size(type));
        std::vector<float> wq(w.size());  // the weights as stored, back in FP32
        for (std::size_t i = 0; i < w.size(); ++i) {
            if (type == model::dtype::f32) {
                std::memcpy(bytes.data() + 4 * i, &w[i], 4);
                wq[i] = w[i];
                continue;
            }
            std::uint16_t h = type == model::dtype::bf16 ? model::f32_to_bf16(w[i]) : model::f32_to_f16(w[i]);
            std::memcpy(bytes.data() + 2 * i, &h, 2);
            wq[i] = type == model::dtype::bf16 ? model::bf16_to_f32(h) : model::f16_to_f32(h);
        }
        // A column slice of a wider view exercises the row stride.
        model::tensor_view full{type, rows, cols, cols, bytes.data()};
        model::tensor_view view = full.col_slice(4, cols);
        const std::int64_t n = cols - 4;
        for (std::int64_t t : {1, 3, 8, 20}) {
            INFO("dtype " << model::to_string(type) << " t " << t);
            std::vector<float> x(t * n), y(t * rows, -7.0f);
            for (auto& e : x) e = u(gen);
            model::linear(pool, view, x.data(), t, n, y.data(), rows);
            double worst = 0;
            for (std::int64_t i = 0; i < t; ++i)
                for (std::int64_t r = 0; r < rows; ++r) {
                    double ref = 0;
                    for (std::int64_t k = 0; k < n; ++k) ref += double(wq[r * cols + 4 + k]) * x[i * n + k];
                    worst = std::max(worst, std::abs(ref - y[i * rows + r]));
                }
            CHECK(worst < 1e-4);
        }
    }
}
