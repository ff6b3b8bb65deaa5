// RMSNorm, RoPE and whole one-layer models (dense and MoE) against naive FP64
// code written here, independently of model/ (only the file writer and the BF16
// rounding of the KV cache's keys and values are shared).
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <random>

#include "model/core/bf16.hpp"
#include "model/cpu/kernels.hpp"
#include "model/weights/safetensors.hpp"
#include "tests/model/transformer_fixture.hpp"

using namespace calserve;
using vec = std::vector<double>;

namespace {

struct naive_tensor {
    std::vector<std::int64_t> shape;
    vec data;
};

// The whole model's weights, kept here in FP64 (written to disk as F32).
struct naive_model {
    model::hf_config cfg;
    std::map<std::string, naive_tensor> w;
    bool highest_index_on_tie = false;  // the wrong rule, to prove the tie test is sensitive

    const vec& t(const std::string& n) const { return w.at(n).data; }
};

vec matvec(const vec& m, std::int64_t rows, std::int64_t cols, const vec& x) {
    vec y(static_cast<std::size_t>(rows), 0.0);
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) y[r] += m[r * cols + c] * x[c];
    return y;
}

vec rms(const vec& x, const vec& w, double eps) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double s = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
    vec y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * w[i];
    return y;
}

// Rotate-half RoPE written as a rotation of the pairs (i, i + d/2).
void rope(double* v, std::int64_t d, std::int64_t pos, double theta) {
    for (std::int64_t i = 0; i < d / 2; ++i) {
        const double a = static_cast<double>(pos) * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
        const double x = v[i], y = v[i + d / 2];
        v[i] = x * std::cos(a) - y * std::sin(a);
        v[i + d / 2] = x * std::sin(a) + y * std::cos(a);
    }
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }

// A key or value as the KV cache stores it: rounded to BF16.
double as_cached(double x) { return model::bf16_to_f32(model::f32_to_bf16(static_cast<float>(x))); }

vec mlp(const naive_model& m, const std::string& p, std::int64_t inter, const vec& x) {
    const auto h = m.cfg.hidden_size;
    vec g = matvec(m.t(p + "gate_proj.weight"), inter, h, x), u = matvec(m.t(p + "up_proj.weight"), inter, h, x);
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
    return matvec(m.t(p + "down_proj.weight"), h, inter, g);
}

vec moe(const naive_model& m, const std::string& p, const vec& x) {
    const auto& c = m.cfg;
    vec logits = matvec(m.t(p + "gate.weight"), c.num_experts, c.hidden_size, x);
    double mx = *std::max_element(logits.begin(), logits.end()), sum = 0;
    for (double& l : logits) sum += (l = std::exp(l - mx));
    for (double& l : logits) l /= sum;
    std::vector<int> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    if (m.highest_index_on_tie)
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
            return logits[a] > logits[b] || (logits[a] == logits[b] && a > b);
        });
    double norm = 0;
    for (int k = 0; k < c.num_experts_per_tok; ++k) norm += logits[order[k]];
    vec out(x.size(), 0.0);
    for (int k = 0; k < c.num_experts_per_tok; ++k) {
        const double wgt = logits[order[k]] / (c.norm_topk_prob ? norm : 1.0);
        vec y = mlp(m, p + "experts." + std::to_string(order[k]) + ".", c.moe_intermediate_size, x);
        for (std::size_t i = 0; i < x.size(); ++i) out[i] += wgt * y[i];
    }
    return out;
}

// All-position logits of `toks` through the naive model.
std::vector<vec> naive_forward(const naive_model& m, const std::vector<model::token_id>& toks) {
    const auto& c = m.cfg;
    const auto h = c.hidden_size, d = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
    const auto T = static_cast<std::int64_t>(toks.size());
    std::vector<vec> x(T);
    for (std::int64_t i = 0; i < T; ++i) x[i] = vec(m.t("model.embed_tokens.weight").begin() + toks[i] * h,
                                                  m.t("model.embed_tokens.weight").begin() + (toks[i] + 1) * h);
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        std::vector<vec> q(T), k(T), v(T);
        for (std::int64_t i = 0; i < T; ++i) {
            vec xn = rms(x[i], m.t(p + "input_layernorm.weight"), c.rms_norm_eps);
            q[i] = matvec(m.t(p + "self_attn.q_proj.weight"), nh * d, h, xn);
            k[i] = matvec(m.t(p + "self_attn.k_proj.weight"), nkv * d, h, xn);
            v[i] = matvec(m.t(p + "self_attn.v_proj.weight"), nkv * d, h, xn);
            for (std::int64_t hh = 0; hh < nh; ++hh) {
                vec head(q[i].begin() + hh * d, q[i].begin() + (hh + 1) * d);
                head = rms(head, m.t(p + "self_attn.q_norm.weight"), c.rms_norm_eps);
                rope(head.data(), d, i, c.rope_theta);
                std::copy(head.begin(), head.end(), q[i].begin() + hh * d);
            }
            for (std::int64_t hh = 0; hh < nkv; ++hh) {
                vec head(k[i].begin() + hh * d, k[i].begin() + (hh + 1) * d);
                head = rms(head, m.t(p + "self_attn.k_norm.weight"), c.rms_norm_eps);
                rope(head.data(), d, i, c.rope_theta);
                std::copy(head.begin(), head.end(), k[i].begin() + hh * d);
            }
            for (double& e : k[i]) e = as_cached(e);
            for (double& e : v[i]) e = as_cached(e);
        }
        for (std::int64_t i = 0; i < T; ++i) {
            vec attn(nh * d, 0.0);
            for (std::int64_t hh = 0; hh < nh; ++hh) {
                const std::int64_t kh = hh / (nh / nkv);
                vec s(i + 1);
                for (std::int64_t j = 0; j <= i; ++j) {
                    for (std::int64_t e = 0; e < d; ++e) s[j] += q[i][hh * d + e] * k[j][kh * d + e];
                    s[j] /= std::sqrt(static_cast<double>(d));
                }
                double mx = *std::max_element(s.begin(), s.end()), sum = 0;
                for (double& e : s) sum += (e = std::exp(e - mx));
                for (std::int64_t j = 0; j <= i; ++j)
                    for (std::int64_t e = 0; e < d; ++e) attn[hh * d + e] += s[j] / sum * v[j][kh * d + e];
            }
            vec o = matvec(m.t(p + "self_attn.o_proj.weight"), h, nh * d, attn);
            for (std::int64_t e = 0; e < h; ++e) x[i][e] += o[e];
            vec xn = rms(x[i], m.t(p + "post_attention_layernorm.weight"), c.rms_norm_eps);
            vec f = c.layer_is_moe(l) ? moe(m, p + "mlp.", xn) : mlp(m, p + "mlp.", c.intermediate_size, xn);
            for (std::int64_t e = 0; e < h; ++e) x[i][e] += f[e];
        }
    }
    std::vector<vec> logits;
    const vec& head = m.t(c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
    for (std::int64_t i = 0; i < T; ++i)
        logits.push_back(matvec(head, c.vocab_size, h, rms(x[i], m.t("model.norm.weight"), c.rms_norm_eps)));
    return logits;
}

void add(naive_model& m, const std::string& name, std::vector<std::int64_t> shape, double centre, double spread,
         std::mt19937& gen) {
    std::int64_t n = 1;
    for (auto s : shape) n *= s;
    std::uniform_real_distribution<double> u(-spread, spread);
    naive_tensor t{shape, vec(static_cast<std::size_t>(n))};
    for (auto& v : t.data) v = static_cast<float>(centre + u(gen));  // representable in F32 exactly
    m.w[name] = std::move(t);
}

naive_model build(const model::hf_config& c, unsigned seed) {
    naive_model m{c, {}};
    std::mt19937 gen(seed);
    const auto h = c.hidden_size, d = c.head_dim;
    add(m, "model.embed_tokens.weight", {c.vocab_size, h}, 0, 1.0, gen);
    add(m, "model.norm.weight", {h}, 1, 0.2, gen);
    if (!c.tie_word_embeddings) add(m, "lm_head.weight", {c.vocab_size, h}, 0, 0.5, gen);
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        add(m, p + "input_layernorm.weight", {h}, 1, 0.2, gen);
        add(m, p + "post_attention_layernorm.weight", {h}, 1, 0.2, gen);
        add(m, p + "self_attn.q_norm.weight", {d}, 1, 0.2, gen);
        add(m, p + "self_attn.k_norm.weight", {d}, 1, 0.2, gen);
        add(m, p + "self_attn.q_proj.weight", {c.num_attention_heads * d, h}, 0, 0.4, gen);
        add(m, p + "self_attn.k_proj.weight", {c.num_key_value_heads * d, h}, 0, 0.4, gen);
        add(m, p + "self_attn.v_proj.weight", {c.num_key_value_heads * d, h}, 0, 0.4, gen);
        add(m, p + "self_attn.o_proj.weight", {h, c.num_attention_heads * d}, 0, 0.3, gen);
        auto add_mlp = [&](const std::string& q, std::int64_t inter) {
            add(m, q + "gate_proj.weight", {inter, h}, 0, 0.4, gen);
            add(m, q + "up_proj.weight", {inter, h}, 0, 0.4, gen);
            add(m, q + "down_proj.weight", {h, inter}, 0, 0.3, gen);
        };
        if (!c.layer_is_moe(l)) {
            add_mlp(p + "mlp.", c.intermediate_size);
            continue;
        }
        add(m, p + "mlp.gate.weight", {c.num_experts, h}, 0, 0.5, gen);
        for (std::int64_t e = 0; e < c.num_experts; ++e) add_mlp(p + "mlp.experts." + std::to_string(e) + ".", c.moe_intermediate_size);
    }
    return m;
}

std::filesystem::path save(const naive_model& m, const std::string& tag) {
    auto dir = test::scratch_dir(tag);
    std::ofstream(dir / "config.json") << m.cfg.to_json("float32");
    std::vector<std::vector<float>> f32;
    std::vector<model::tensor_to_write> out;
    for (const auto& [name, t] : m.w) f32.emplace_back(t.data.begin(), t.data.end());
    std::size_t i = 0;
    for (const auto& [name, t] : m.w)
        out.push_back({name, model::dtype::f32, t.shape, std::as_bytes(std::span(f32[i++]))});
    REQUIRE(model::write_safetensors(dir / "model.safetensors", out).ok());
    return dir;
}

model::hf_config one_layer(bool moe_layer) {
    model::hf_config c;
    c.architecture = moe_layer ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM";
    c.vocab_size = 50, c.hidden_size = 16, c.num_hidden_layers = 1, c.num_attention_heads = 4;
    c.num_key_value_heads = 2, c.head_dim = 8, c.intermediate_size = 24, c.rope_theta = 10000.0;
    c.rms_norm_eps = 1e-6, c.max_position_embeddings = 128;
    if (moe_layer) c.num_experts = 4, c.num_experts_per_tok = 2, c.moe_intermediate_size = 12, c.norm_topk_prob = true;
    return c;
}

double compare(model::transformer& t, const naive_model& m, const std::vector<model::token_id>& toks) {
    const auto v = static_cast<std::size_t>(m.cfg.vocab_size);
    std::vector<float> got(toks.size() * v);
    REQUIRE(t.prefill_all(1, toks, got).ok());
    auto want = naive_forward(m, toks);
    double worst = 0;
    for (std::size_t i = 0; i < toks.size(); ++i)
        for (std::size_t j = 0; j < v; ++j) worst = std::max(worst, std::abs(got[i * v + j] - want[i][j]));
    t.free_all();
    return worst;
}

}  // namespace

TEST_CASE("rmsnorm matches the formula") {
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> u(-3, 3);
    std::vector<float> x(37), w(37), out(37);
    for (auto& e : x) e = u(gen);
    for (auto& e : w) e = u(gen);
    model::rmsnorm(x.data(), w.data(), 37, 1e-5f, out.data());
    double ss = 0;
    for (float e : x) ss += double(e) * e;
    const double s = 1.0 / std::sqrt(ss / 37 + 1e-5);
    for (int i = 0; i < 37; ++i) CHECK(out[i] == Approx(x[i] * s * w[i]).epsilon(1e-5));
}

TEST_CASE("rope rotates pairs (i, i + d/2) by pos * theta^(-2i/d)") {
    const std::int64_t d = 16;
    const double theta = 10000.0;
    std::vector<double> ref(d);
    std::vector<float> v(d), cs(d / 2), sn(d / 2);
    for (std::int64_t i = 0; i < d; ++i) v[i] = static_cast<float>(ref[i] = 0.1 * static_cast<double>(i) - 0.5);
    const std::int64_t pos = 37;
    for (std::int64_t i = 0; i < d / 2; ++i) {
        const double a = pos * std::pow(theta, -2.0 * static_cast<double>(i) / d);
        cs[i] = static_cast<float>(std::cos(a));
        sn[i] = static_cast<float>(std::sin(a));
    }
    model::rope_rotate_half(v.data(), cs.data(), sn.data(), d);
    rope(ref.data(), d, pos, theta);
    for (std::int64_t i = 0; i < d; ++i) CHECK(v[i] == Approx(ref[i]).margin(1e-6));
    // Rotation keeps the norm.
    double n0 = 0, n1 = 0;
    for (std::int64_t i = 0; i < d; ++i) n0 += (0.1 * i - 0.5) * (0.1 * i - 0.5), n1 += double(v[i]) * v[i];
    CHECK(n1 == Approx(n0).epsilon(1e-6));
}

TEST_CASE("one-layer dense model matches the naive computation") {
    for (bool tied : {false, true}) {
        auto c = one_layer(false);
        c.tie_word_embeddings = tied;
        auto m = build(c, 5);
        auto t = test::load_model(save(m, "naive-dense"));
        CHECK(compare(*t, m, {3, 14, 15, 9, 26, 5, 3, 5, 8, 9, 7, 9, 32, 38, 46, 2, 6, 43, 3, 49}) < 1e-4);
    }
}

TEST_CASE("one-layer MoE model matches the naive computation") {
    auto m = build(one_layer(true), 6);
    auto t = test::load_model(save(m, "naive-moe"));
    CHECK(compare(*t, m, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}) < 1e-4);
    auto t2 = test::load_model(save(m, "naive-moe-tp2"), 2);
    CHECK(compare(*t2, m, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}) < 1e-4);
}

TEST_CASE("MoE ties go to the lowest expert index") {
    const std::vector<float> logits{1.0f, 3.0f, 2.0f, 3.0f, 3.0f};
    auto top2 = model::select_experts(logits, 2, false);
    REQUIRE(top2.size() == 2);
    CHECK(top2[0].expert == 1);
    CHECK(top2[1].expert == 3);
    auto renorm = model::select_experts(logits, 2, true);
    CHECK(renorm[0].weight + renorm[1].weight == Approx(1.0f));
    // Whole model: experts 1 and 3 share a router row, 0 and 2 have zero rows, k = 1.
    auto c = one_layer(true);
    c.num_experts_per_tok = 1;
    c.norm_topk_prob = false;
    auto m = build(c, 8);
    auto& router = m.w["model.layers.0.mlp.gate.weight"].data;
    for (std::int64_t e : {0, 2})
        std::fill(router.begin() + e * c.hidden_size, router.begin() + (e + 1) * c.hidden_size, 0.0);
    std::copy(router.begin() + 1 * c.hidden_size, router.begin() + 2 * c.hidden_size, router.begin() + 3 * c.hidden_size);
    auto t = test::load_model(save(m, "moe-tie"));
    const std::vector<model::token_id> toks{4, 8, 15, 16, 23, 42};
    CHECK(compare(*t, m, toks) < 1e-4);
    m.highest_index_on_tie = true;
    CHECK(compare(*t, m, toks) > 1e-2);  // the other rule gives visibly different logits
}
