// calserve_v_cache_divergence: the S8 V-cache against BF16 V on one model (issue 29,
// document 003 section 10: "token divergence over long contexts, scale granularity,
// where dequantisation happens"; docs/performance.md uses its table).
//
//   calserve_v_cache_divergence <model dir> [generated tokens = 1024] [prompt tokens = 32] [prompts = 3]
//                               [seed = 1] [tensor parallel = 1] [candidate = s8v | bf16-arith]
//
// Per prompt (seeded random tokens): the BF16-V model decodes greedily; the S8-V model
// is teacher-forced along those tokens and compared at every generated position (top-1
// agreement, max |logit error|, cosine, KL(BF16 || S8) mean and max), then decodes freely
// and the first position where its greedy tokens leave BF16's is reported, with the count
// of positions whose tokens still agree. Both run FP32 arithmetic, so the V cache is the
// only difference. One JSON line per prompt follows the table. `bf16-arith` as the candidate
// measures another perturbation the same way for scale: BF16 V with the bf16 arithmetic mode
// (docs/decisions.md, "Arithmetic") against BF16 V with fp32 arithmetic.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/cpu/transformer.hpp"

namespace {
using namespace calserve;

std::size_t argmax(const std::vector<float>& x) {
    return static_cast<std::size_t>(std::max_element(x.begin(), x.end()) - x.begin());
}

// KL(p || q) of the softmaxes of two logit rows, in double.
double kl(const std::vector<float>& a, const std::vector<float>& b) {
    const double ma = *std::max_element(a.begin(), a.end()), mb = *std::max_element(b.begin(), b.end());
    double za = 0, zb = 0;
    for (std::size_t i = 0; i < a.size(); ++i) za += std::exp(a[i] - ma), zb += std::exp(b[i] - mb);
    double d = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double lp = a[i] - ma - std::log(za), lq = b[i] - mb - std::log(zb);
        d += std::exp(lp) * (lp - lq);
    }
    return std::max(d, 0.0);
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
    double ab = 0, aa = 0, bb = 0;
    for (std::size_t i = 0; i < a.size(); ++i) ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
    return ab / std::sqrt(aa * bb);
}

struct prompt_result {
    std::size_t agree = 0, free_agree = 0;
    std::int64_t free_divergence = -1;  // -1: never
    double max_err = 0, logit_rms = 0, kl_sum = 0, kl_max = 0, cos_min = 1;
};

std::unique_ptr<model::transformer> load(const std::filesystem::path& dir, int tp, model::v_cache_dtype v,
                                         model::arithmetic arith = model::arithmetic::fp32) {
    model::load_options o;
    o.threads = 2;
    o.tensor_parallel = tp;
    o.v_cache = v;
    o.arith = arith;
    auto m = model::transformer::load(dir, o);
    if (!m) throw std::runtime_error(m.error().what());
    return std::move(*m);
}

void check(const void_result& r) {
    if (!r) throw std::runtime_error(r.error().what());
}

prompt_result run_prompt(model::transformer& bf16, model::transformer& s8, const std::vector<model::token_id>& prompt,
                         std::size_t n_gen, model::seq_id id) {
    const auto v = static_cast<std::size_t>(bf16.shape().vocab_size);
    std::vector<float> a(v), b(v);
    std::vector<model::token_id> gen;
    prompt_result r;
    double sq = 0;
    check(bf16.prefill(id, prompt, a));
    check(s8.prefill(id, prompt, b));
    for (std::size_t i = 0; i < n_gen; ++i) {
        const auto t = static_cast<model::token_id>(argmax(a));
        gen.push_back(t);
        r.agree += argmax(b) == static_cast<std::size_t>(t);
        for (std::size_t j = 0; j < v; ++j) r.max_err = std::max(r.max_err, double(std::abs(a[j] - b[j]))), sq += double(a[j]) * a[j];
        const double d = kl(a, b);
        r.kl_sum += d, r.kl_max = std::max(r.kl_max, d), r.cos_min = std::min(r.cos_min, cosine(a, b));
        if (i + 1 == n_gen) break;
        check(bf16.decode(id, t, a));
        check(s8.decode(id, t, b));  // teacher-forced along BF16's tokens
    }
    r.logit_rms = std::sqrt(sq / double(n_gen * v));
    check(s8.prefill(id + 1, prompt, b));
    for (std::size_t i = 0; i < n_gen; ++i) {
        const auto t = static_cast<model::token_id>(argmax(b));
        if (t == gen[i]) ++r.free_agree;
        else if (r.free_divergence < 0) r.free_divergence = static_cast<std::int64_t>(i);
        if (i + 1 < n_gen) check(s8.decode(id + 1, t, b));
    }
    bf16.free_all();
    s8.free_all();
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s <model dir> [generated] [prompt tokens] [prompts] [seed] [tp]\n", argv[0]);
        return 2;
    }
    const std::filesystem::path dir = argv[1];
    const std::size_t n_gen = argc > 2 ? std::stoul(argv[2]) : 1024, n_prompt = argc > 3 ? std::stoul(argv[3]) : 32;
    const std::size_t prompts = argc > 4 ? std::stoul(argv[4]) : 3;
    const unsigned seed = argc > 5 ? static_cast<unsigned>(std::stoul(argv[5])) : 1;
    const int tp = argc > 6 ? std::stoi(argv[6]) : 1;
    const std::string candidate = argc > 7 ? argv[7] : "s8v";
    if (candidate != "s8v" && candidate != "bf16-arith") {
        std::fprintf(stderr, "candidate must be s8v or bf16-arith\n");
        return 2;
    }
    try {
        auto bf16 = load(dir, tp, model::v_cache_dtype::bf16);
        auto s8 = candidate == "s8v" ? load(dir, tp, model::v_cache_dtype::s8)
                                     : load(dir, tp, model::v_cache_dtype::bf16, model::arithmetic::bf16);
        const auto& sh = bf16->shape();
        std::printf("model %s: %lld layers, %lld KV heads x head_dim %lld, vocab %lld; %zu prompt(s) of %zu tokens, "
                    "%zu generated; candidate %s (s8v: one FP32 scale per (layer, KV head, position), dequantised "
                    "in the attention kernel's value pass) against BF16 V, fp32 arithmetic\n",
                    dir.filename().c_str(), static_cast<long long>(sh.num_layers), static_cast<long long>(sh.num_kv_heads),
                    static_cast<long long>(sh.head_dim), static_cast<long long>(sh.vocab_size), prompts, n_prompt, n_gen,
                    candidate.c_str());
        std::printf("| prompt | teacher-forced top-1 agreement | max abs logit error (logit rms) | min cosine | mean KL | "
                    "max KL | free-running greedy leaves the BF16 V stream at | free-running tokens equal |\n"
                    "| --- | --- | --- | --- | --- | --- | --- | --- |\n");
        std::mt19937 rng(seed);
        std::uniform_int_distribution<int> tok(0, static_cast<int>(sh.vocab_size) - 1);
        for (std::size_t p = 0; p < prompts; ++p) {
            std::vector<model::token_id> prompt(n_prompt);
            for (auto& t : prompt) t = tok(rng);
            const auto t0 = std::chrono::steady_clock::now();
            const auto r = run_prompt(*bf16, *s8, prompt, n_gen, 1);
            const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            const std::string div = r.free_divergence < 0 ? "never" : "token " + std::to_string(r.free_divergence);
            std::printf("| %zu | %zu / %zu | %.3g (%.3g) | %.6f | %.3g | %.3g | %s | %zu / %zu |\n", p, r.agree, n_gen,
                        r.max_err, r.logit_rms, r.cos_min, r.kl_sum / double(n_gen), r.kl_max, div.c_str(), r.free_agree,
                        n_gen);
            std::fprintf(stderr,
                         "{\"prompt\":%zu,\"generated\":%zu,\"agree\":%zu,\"max_abs_logit_error\":%g,\"logit_rms\":%g,"
                         "\"cosine_min\":%g,\"kl_mean\":%g,\"kl_max\":%g,\"free_divergence\":%lld,\"free_agree\":%zu,"
                         "\"seconds\":%.1f}\n",
                         p, n_gen, r.agree, r.max_err, r.logit_rms, r.cos_min, r.kl_sum / double(n_gen), r.kl_max,
                         static_cast<long long>(r.free_divergence), r.free_agree, secs);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
