// calserve_model_accuracy: both arithmetic modes of the CPU transformer against a
// float64 evaluation of the same weights (issue 28; docs/decisions.md uses its table).
//
//   calserve_model_accuracy <model dir> [generated tokens = 256] [prompt tokens = 32] [seed = 1] [gguf file]
//
// With a GGUF file of the same checkpoint (e.g. its Q8_0 from `calserve make-model
// --format gguf` or write_gguf_from_hf), that file is measured too, against the same
// float64 reference of the directory's weights (so its rows include the weight
// quantisation), in both arithmetic modes and, for Q8_0 on a VNNI CPU, both int8 forms.
//
// The float64 model here is written independently of model/cpu (only the weight
// reader is shared): every product, sum, norm, softmax and the KV cache in double;
// RoPE angles as the model defines them (HF: FP32 inv_freq, FP32 pos * inv_freq).
// It decodes a seeded random prompt greedily; each mode is then teacher-forced along
// the reference's tokens and compared at every generated position: top-1 agreement,
// max |logit error|, KL(reference || mode) mean and max. Each mode also decodes
// freely, and the first position where its greedy tokens leave the reference's is
// reported. Dense Qwen3 checkpoints only.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "model/core/thread_pool.hpp"
#include "model/cpu/kernels.hpp"
#include "model/cpu/transformer.hpp"
#include "model/weights/hf_config.hpp"
#include "model/weights/stored_rows.hpp"
#include "model/weights/weights.hpp"

namespace {
using namespace calserve;
using vec = std::vector<double>;

struct ref_layer {
    model::tensor_view q, k, v, o, gate, up, down;
    vec in_norm, post_norm, q_norm, k_norm;
    vec kcache, vcache;  // [pos][kv_dim]
};

struct reference {
    model::hf_config c;
    model::checkpoint ck;
    model::tensor_view embed, head;
    vec final_norm;
    std::vector<ref_layer> layers;
    std::vector<float> inv_freq;
    model::thread_pool pool{2};

    model::tensor_view mat(const std::string& n, std::int64_t r, std::int64_t cols) {
        auto v = ck.matrix(n, r, cols);
        if (!v) throw std::runtime_error(v.error().what());
        return *v;
    }
    vec norm(const std::string& n, std::int64_t len) {
        auto v = ck.vector_f32(n, len);
        if (!v) throw std::runtime_error(v.error().what());
        return vec(v->begin(), v->end());
    }

    // y = W x in double (rows converted exactly to FP32, then widened).
    vec matvec(const model::tensor_view& w, const vec& x) {
        vec y(static_cast<std::size_t>(w.rows));
        pool.parallel_for(w.rows, 64, w.rows * w.cols, [&](std::int64_t b, std::int64_t e) {
            std::vector<float> row(static_cast<std::size_t>(w.cols));
            for (std::int64_t r = b; r < e; ++r) {
                model::convert_row_to_f32(w, r, row.data());
                double s = 0;
                for (std::int64_t i = 0; i < w.cols; ++i) s += static_cast<double>(row[i]) * x[i];
                y[r] = s;
            }
        });
        return y;
    }

    void rms(double* x, const vec& w, std::int64_t n) const {
        double ss = 0;
        for (std::int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
        const double s = 1.0 / std::sqrt(ss / static_cast<double>(n) + c.rms_norm_eps);
        for (std::int64_t i = 0; i < n; ++i) x[i] = x[i] * s * w[i];
    }

    void rope(double* v, std::int64_t pos) const {
        const std::int64_t half = c.head_dim / 2;
        for (std::int64_t i = 0; i < half; ++i) {
            const double a = static_cast<double>(static_cast<float>(pos) * inv_freq[i]);
            const double x = v[i], y = v[i + half];
            v[i] = x * std::cos(a) - y * std::sin(a);
            v[i + half] = y * std::cos(a) + x * std::sin(a);
        }
    }

    explicit reference(const std::filesystem::path& dir) {
        auto cfg = model::load_hf_config(dir);
        if (!cfg) throw std::runtime_error(cfg.error().what());
        c = *cfg;
        if (c.is_moe()) throw std::runtime_error("the float64 reference covers dense models only");
        auto loaded = model::checkpoint::load(dir);
        if (!loaded) throw std::runtime_error(loaded.error().what());
        ck = std::move(*loaded);
        const std::int64_t h = c.hidden_size, qd = c.num_attention_heads * c.head_dim;
        const std::int64_t kvd = c.num_key_value_heads * c.head_dim;
        embed = mat("model.embed_tokens.weight", c.vocab_size, h);
        head = c.tie_word_embeddings ? embed : mat("lm_head.weight", c.vocab_size, h);
        final_norm = norm("model.norm.weight", h);
        for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
            const std::string p = "model.layers." + std::to_string(i) + ".";
            layers.push_back({mat(p + "self_attn.q_proj.weight", qd, h), mat(p + "self_attn.k_proj.weight", kvd, h),
                              mat(p + "self_attn.v_proj.weight", kvd, h), mat(p + "self_attn.o_proj.weight", h, qd),
                              mat(p + "mlp.gate_proj.weight", c.intermediate_size, h),
                              mat(p + "mlp.up_proj.weight", c.intermediate_size, h),
                              mat(p + "mlp.down_proj.weight", h, c.intermediate_size),
                              norm(p + "input_layernorm.weight", h), norm(p + "post_attention_layernorm.weight", h),
                              norm(p + "self_attn.q_norm.weight", c.head_dim),
                              norm(p + "self_attn.k_norm.weight", c.head_dim), {}, {}});
        }
        for (std::int64_t i = 0; i < c.head_dim / 2; ++i)
            inv_freq.push_back(static_cast<float>(
                1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(c.head_dim))));
    }

    // Appends `token` at position `pos` (= tokens so far) and returns its logits.
    vec step(model::token_id token, std::int64_t pos) {
        const std::int64_t h = c.hidden_size, hd = c.head_dim, nh = c.num_attention_heads;
        const std::int64_t nkv = c.num_key_value_heads, group = nh / nkv, kvd = nkv * hd;
        std::vector<float> row(static_cast<std::size_t>(h));
        model::convert_row_to_f32(embed, token, row.data());
        vec x(row.begin(), row.end());
        for (auto& l : layers) {
            vec xn = x;
            rms(xn.data(), l.in_norm, h);
            vec q = matvec(l.q, xn), k = matvec(l.k, xn), v = matvec(l.v, xn);
            for (std::int64_t hh = 0; hh < nh; ++hh) rms(q.data() + hh * hd, l.q_norm, hd), rope(q.data() + hh * hd, pos);
            for (std::int64_t kh = 0; kh < nkv; ++kh) rms(k.data() + kh * hd, l.k_norm, hd), rope(k.data() + kh * hd, pos);
            l.kcache.insert(l.kcache.end(), k.begin(), k.end());
            l.vcache.insert(l.vcache.end(), v.begin(), v.end());
            vec attn(static_cast<std::size_t>(nh * hd), 0.0), score(static_cast<std::size_t>(pos + 1));
            for (std::int64_t hh = 0; hh < nh; ++hh) {
                const std::int64_t kh = hh / group;
                double m = -INFINITY, sum = 0;
                for (std::int64_t t = 0; t <= pos; ++t) {
                    double s = 0;
                    for (std::int64_t i = 0; i < hd; ++i) s += q[hh * hd + i] * l.kcache[t * kvd + kh * hd + i];
                    score[t] = s / std::sqrt(static_cast<double>(hd));
                    m = std::max(m, score[t]);
                }
                for (std::int64_t t = 0; t <= pos; ++t) sum += (score[t] = std::exp(score[t] - m));
                for (std::int64_t t = 0; t <= pos; ++t)
                    for (std::int64_t i = 0; i < hd; ++i)
                        attn[hh * hd + i] += score[t] / sum * l.vcache[t * kvd + kh * hd + i];
            }
            const vec o = matvec(l.o, attn);
            for (std::int64_t i = 0; i < h; ++i) x[i] += o[i];
            xn = x;
            rms(xn.data(), l.post_norm, h);
            vec g = matvec(l.gate, xn);
            const vec u = matvec(l.up, xn);
            for (std::size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
            const vec d = matvec(l.down, g);
            for (std::int64_t i = 0; i < h; ++i) x[i] += d[i];
        }
        rms(x.data(), final_norm, h);
        return matvec(head, x);
    }
};

template <class T>
std::int64_t argmax(const std::vector<T>& v) {
    return std::max_element(v.begin(), v.end()) - v.begin();
}

// KL(p || q) of the softmaxes of two logit vectors, in double.
double kl(const vec& p_logits, const std::vector<float>& q_logits) {
    const double mp = *std::max_element(p_logits.begin(), p_logits.end());
    const double mq = *std::max_element(q_logits.begin(), q_logits.end());
    double zp = 0, zq = 0;
    for (std::size_t i = 0; i < p_logits.size(); ++i) zp += std::exp(p_logits[i] - mp), zq += std::exp(q_logits[i] - mq);
    double d = 0;
    for (std::size_t i = 0; i < p_logits.size(); ++i) {
        const double lp = p_logits[i] - mp - std::log(zp), lq = q_logits[i] - mq - std::log(zq);
        d += std::exp(lp) * (lp - lq);
    }
    return d;
}

struct mode_result {
    std::int64_t agree = 0;
    double max_err = 0, kl_sum = 0, kl_max = 0;
    std::int64_t free_divergence = -1;  // first generated position whose free-running token differs
};

mode_result measure(const std::filesystem::path& dir, model::arithmetic arith, const std::vector<model::token_id>& prompt,
                    const std::vector<model::token_id>& gen, const std::vector<vec>& ref_logits) {
    model::load_options o;
    o.arith = arith;
    auto m = model::transformer::load(dir, o);
    if (!m) throw std::runtime_error(m.error().what());
    const auto v = static_cast<std::size_t>((*m)->shape().vocab_size);
    std::vector<float> logits(v);
    mode_result r;
    auto compare = [&](std::size_t i) {
        r.agree += argmax(logits) == argmax(ref_logits[i]);
        for (std::size_t j = 0; j < v; ++j) r.max_err = std::max(r.max_err, std::abs(logits[j] - ref_logits[i][j]));
        const double d = kl(ref_logits[i], logits);
        r.kl_sum += d;
        r.kl_max = std::max(r.kl_max, d);
    };
    if (!(*m)->prefill(1, prompt, logits)) throw std::runtime_error("prefill failed");
    compare(0);
    for (std::size_t i = 1; i < gen.size(); ++i) {
        if (!(*m)->decode(1, gen[i - 1], logits)) throw std::runtime_error("decode failed");
        compare(i);
    }
    if (!(*m)->prefill(2, prompt, logits)) throw std::runtime_error("prefill failed");
    for (std::size_t i = 0; i < gen.size(); ++i) {
        const auto t = static_cast<model::token_id>(argmax(logits));
        if (t != gen[i]) {
            r.free_divergence = static_cast<std::int64_t>(i);
            break;
        }
        if (i + 1 < gen.size() && !(*m)->decode(2, t, logits)) throw std::runtime_error("decode failed");
    }
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s <model dir> [generated tokens] [prompt tokens] [seed] [gguf file]\n", argv[0]);
        return 2;
    }
    const std::filesystem::path dir = argv[1];
    const std::size_t n_gen = argc > 2 ? std::stoul(argv[2]) : 256, n_prompt = argc > 3 ? std::stoul(argv[3]) : 32;
    const unsigned seed = argc > 4 ? static_cast<unsigned>(std::stoul(argv[4])) : 1;
    try {
        reference ref(dir);
        std::mt19937 rng(seed);
        std::uniform_int_distribution<int> tok(0, static_cast<int>(ref.c.vocab_size) - 1);
        std::vector<model::token_id> prompt(n_prompt), gen;
        for (auto& t : prompt) t = tok(rng);
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<vec> ref_logits;
        vec logits;
        for (std::size_t i = 0; i < prompt.size(); ++i) logits = ref.step(prompt[i], static_cast<std::int64_t>(i));
        for (std::size_t i = 0; i < n_gen; ++i) {
            ref_logits.push_back(logits);
            gen.push_back(static_cast<model::token_id>(argmax(logits)));
            if (i + 1 < n_gen) logits = ref.step(gen.back(), static_cast<std::int64_t>(n_prompt + i));
        }
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        double margin = 0, spread = 0;  // reference top-1 - top-2, and top-1 - mean, averaged
        for (const vec& l : ref_logits) {
            vec sorted = l;
            std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
            double mean = 0;
            for (double x : l) mean += x;
            margin += sorted[0] - sorted[1];
            spread += sorted[0] - mean / static_cast<double>(l.size());
        }
        std::printf("float64 reference: %zu prompt + %zu generated tokens in %.0f s, %zu distinct generated; "
                    "mean top-1 margin %.3g, mean top-1 - mean logit %.3g\n",
                    n_prompt, n_gen, secs, std::set<model::token_id>(gen.begin(), gen.end()).size(),
                    margin / static_cast<double>(n_gen), spread / static_cast<double>(n_gen));
        std::printf("| mode | top-1 agreement | max abs logit error | mean KL | max KL | free-running greedy leaves the "
                    "reference at |\n| --- | --- | --- | --- | --- | --- |\n");
        struct run {
            std::filesystem::path path;
            model::arithmetic arith;
            bool vnni;
            std::string label;
        };
        std::vector<run> runs;
        for (auto arith : {model::arithmetic::fp32, model::arithmetic::bf16})
            runs.push_back({dir, arith, true, model::to_string(arith)});
        if (argc > 5)
            for (auto arith : {model::arithmetic::fp32, model::arithmetic::bf16})
                for (bool vnni : {true, false})
                    if (vnni || model::q8_dot_vnni())
                        runs.push_back({argv[5], arith, vnni,
                                        std::string("gguf, ") + model::to_string(arith) +
                                            (model::q8_dot_vnni() || !vnni ? (vnni ? ", int8 VNNI" : ", int8 AVX2") : "")});
        for (const run& x : runs) {
            model::allow_q8_dot_vnni(x.vnni);
            const auto r = measure(x.path, x.arith, prompt, gen, ref_logits);
            model::allow_q8_dot_vnni(true);
            std::printf("| %s | %lld / %zu | %.3g | %.3g | %.3g | %s |\n", x.label.c_str(),
                        static_cast<long long>(r.agree), n_gen, r.max_err, r.kl_sum / static_cast<double>(n_gen),
                        r.kl_max,
                        r.free_divergence < 0 ? "never" : ("token " + std::to_string(r.free_divergence)).c_str());
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
