#pragma once
// Small synthetic checkpoints for the transformer tests (vocabularies of a few
// hundred tokens keep the LM head cheap, so prompt lengths up to 257 stay fast).
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/weights/synthetic_model.hpp"
#include "model/cpu/transformer.hpp"
#include "tests/support/test_paths.hpp"

namespace calserve::test {

inline model::hf_config small_config(bool moe, bool tied = false) {
    auto spec = model::synthetic_preset(moe ? "tiny-moe" : "tiny-dense");
    model::hf_config c = spec->config;
    c.vocab_size = 384;
    c.max_position_embeddings = 1024;
    c.tie_word_embeddings = tied;
    return c;
}

inline std::filesystem::path write_small_model(const std::string& tag, const model::hf_config& c,
                                               const std::string& dtype = "f32", std::uint64_t shard_bytes = 0) {
    auto dir = scratch_dir(tag);
    model::synthetic_spec spec{c, shard_bytes};
    auto r = model::write_synthetic_model(spec, dir, 7, dtype);
    if (!r) throw std::runtime_error(r.error().what());
    return dir;
}

inline std::unique_ptr<model::transformer> load_model(const std::filesystem::path& dir, int tp = 1, int threads = 2,
                                                     model::arithmetic arith = model::arithmetic::fp32,
                                                     model::v_cache_dtype v_cache = model::v_cache_dtype::bf16) {
    model::load_options o;
    o.v_cache = v_cache;
    o.threads = threads;
    o.tensor_parallel = tp;
    o.arith = arith;
    auto m = model::transformer::load(dir, o);
    if (!m) throw std::runtime_error(m.error().what());
    return std::move(*m);
}

inline std::vector<model::token_id> random_tokens(std::size_t n, std::int64_t vocab, unsigned seed = 3) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> d(0, static_cast<int>(vocab) - 1);
    std::vector<model::token_id> out(n);
    for (auto& t : out) t = d(gen);
    return out;
}

inline float max_abs_diff(const float* a, const float* b, std::size_t n) {
    float m = 0.0f;
    for (std::size_t i = 0; i < n; ++i) m = std::max(m, std::abs(a[i] - b[i]));
    return m;
}

}  // namespace calserve::test
