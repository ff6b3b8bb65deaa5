// Paged KV cache and blocked causal attention; see attention.hpp.
#include "model/cpu/attention.hpp"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <limits>
#include <type_traits>

#include "config/invariant.hpp"
#include "model/core/bf16.hpp"
#include "model/cpu/kernels.hpp"
#include "model/weights/stored_rows.hpp"

namespace calserve::model {

std::string_view to_string(v_cache_dtype v) { return v == v_cache_dtype::s8 ? "s8" : "bf16"; }

void kv_cache::reserve(std::int64_t layers, std::int64_t kv_heads, std::int64_t head_dim, std::int64_t positions,
                       v_cache_dtype v_dtype) {
    CALSERVE_INVARIANT(head_dim % 2 == 0, "kv_cache: keys are stored in dimension pairs, head_dim must be even");
    if (pages_.empty()) {
        kv_heads_ = kv_heads;
        head_dim_ = head_dim;
        head_stride_ = (head_dim + k_kv_lane_pad - 1) / k_kv_lane_pad * k_kv_lane_pad;
        v_dtype_ = v_dtype;
        pages_.resize(static_cast<std::size_t>(layers));
    }
    const auto pages = static_cast<std::size_t>((positions + k_kv_page_tokens - 1) / k_kv_page_tokens);
    for (auto& layer : pages_)
        while (layer.size() < pages) layer.emplace_back(static_cast<std::size_t>(page_bytes()));  // zeroed
}

namespace {

// One value vector as int8 with its scale (the S8 V-cache rule of attention.hpp).
float quantise_s8(const float* v, std::int64_t n, std::int8_t* q) {
    float top = 0.0f;
    for (std::int64_t d = 0; d < n; ++d) top = std::max(top, std::abs(v[d]));
    if (!(top > 0.0f)) {  // zero (or NaN): store zeros, scale 0
        std::fill(q, q + n, std::int8_t{0});
        return 0.0f;
    }
    const float inv = 127.0f / top;
    for (std::int64_t d = 0; d < n; ++d)
        q[d] = static_cast<std::int8_t>(std::clamp(std::nearbyint(v[d] * inv), -127.0f, 127.0f));
    return top / 127.0f;
}

}  // namespace

void kv_cache::store(std::int64_t layer, std::int64_t pos, std::int64_t kv_head, const float* k, const float* v) {
    const std::int64_t page = pos / k_kv_page_tokens, j = pos % k_kv_page_tokens;
    std::byte* base = pages_[static_cast<std::size_t>(layer)][static_cast<std::size_t>(page)].data();
    auto* keys = reinterpret_cast<kv_element*>(base + key_offset(kv_head));
    for (std::int64_t d = 0; d < head_dim_; ++d) keys[key_index(j, d)] = f32_to_bf16(k[d]);
    if (v_dtype_ == v_cache_dtype::s8) {
        auto* values = reinterpret_cast<std::int8_t*>(base + value_offset(kv_head)) + j * head_stride_;
        reinterpret_cast<float*>(base + scale_offset(kv_head))[j] = quantise_s8(v, head_dim_, values);
        return;
    }
    auto* values = reinterpret_cast<kv_element*>(base + value_offset(kv_head));
    for (std::int64_t d = 0; d < head_dim_; ++d) values[value_index(j, d)] = f32_to_bf16(v[d]);
}

void kv_cache::copy_prefix(const kv_cache& src, std::int64_t positions) {
    kv_heads_ = src.kv_heads_;
    head_dim_ = src.head_dim_;
    head_stride_ = src.head_stride_;
    v_dtype_ = src.v_dtype_;
    const auto pages = static_cast<std::size_t>((positions + k_kv_page_tokens - 1) / k_kv_page_tokens);
    pages_.assign(src.pages_.size(), {});
    for (std::size_t l = 0; l < src.pages_.size(); ++l)
        for (std::size_t p = 0; p < pages && p < src.pages_[l].size(); ++p) pages_[l].push_back(src.pages_[l][p]);
    truncate(positions);
}

void kv_cache::truncate(std::int64_t positions) {
    const auto keep = static_cast<std::size_t>((positions + k_kv_page_tokens - 1) / k_kv_page_tokens);
    const std::int64_t used = positions % k_kv_page_tokens;  // positions in the last kept page (0: it is full)
    const std::int64_t row = head_stride_ * v_bytes();       // bytes of one value row
    for (auto& layer : pages_) {
        if (layer.size() > keep) layer.resize(keep);
        if (used == 0 || layer.size() < keep) continue;
        std::byte* base = layer[keep - 1].data();
        for (std::int64_t h = 0; h < kv_heads_; ++h) {
            auto* keys = reinterpret_cast<kv_element*>(base + key_offset(h));
            for (std::int64_t j = used; j < k_kv_page_tokens; ++j)
                for (std::int64_t d = 0; d < head_dim_; ++d) keys[key_index(j, d)] = 0;
            std::byte* values = base + value_offset(h);
            if (v_dtype_ != v_cache_dtype::s8) {
                auto* v = reinterpret_cast<kv_element*>(values);
                for (std::int64_t j = used; j < k_kv_page_tokens; ++j)
                    for (std::int64_t d = 0; d < head_stride_; ++d) v[value_index(j, d)] = 0;
                continue;
            }
            std::fill(values + used * row, values + k_kv_page_tokens * row, std::byte{0});
            auto* scales = reinterpret_cast<float*>(base + scale_offset(h));
            std::fill(scales + used, scales + k_kv_page_tokens, 0.0f);
        }
    }
}

std::int64_t kv_cache::bytes() const {
    std::int64_t pages = 0;
    for (const auto& layer : pages_) pages += static_cast<std::int64_t>(layer.size());
    return pages * page_bytes();
}

namespace {

// One (row, query head) being attended: its running online-softmax state.
struct pair_state {
    const float* q = nullptr;           // query x log2(e) / sqrt(d), head_dim floats
    const std::uint32_t* qb = nullptr;  // bf16 mode: that query in BF16, head_dim / 2 pairs
    float* o = nullptr;                 // unnormalised output, head_stride floats
    float* s = nullptr;                 // 64 floats: a page's scores, then its probabilities
    std::uint32_t* pp = nullptr;        // bf16 mode: 32 pairs, the page's probabilities in BF16
    float m = 0, l = 0, alpha = 0;
};

// One page for n pairs: keys, values (BF16 or int8 elements) and, for int8, their scales.
using page_fn = void (*)(pair_state* ps, int n, int count, const kv_element* keys, const std::byte* values,
                         const float* scales, std::int64_t head_dim, std::int64_t stride);

namespace avx2 {

struct lanes {
    using reg = __m256;
    static constexpr int W = 8;
    static constexpr int k_acc = 12;  // accumulators per pass (16 registers)
    static reg zero() { return _mm256_setzero_ps(); }
    static reg set1(float x) { return _mm256_set1_ps(x); }
    using ireg = __m256i;
    static reg load(const float* p) { return _mm256_loadu_ps(p); }
    // Eight BF16 pairs (16 elements) and their first / second elements as FP32 (exact).
    static ireg load_pairs(const kv_element* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
    static reg even(ireg v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
    static reg odd(ireg v) { return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u)))); }
    static ireg first_of_pairs(ireg v) { return _mm256_and_si256(v, _mm256_set1_epi32(0xffff)); }
    static ireg set1_pair(std::uint32_t x) { return _mm256_set1_epi32(static_cast<int>(x)); }
    // Subnormal lanes to signed zero.
    static reg flush(reg x) {
        const __m256i v = _mm256_castps_si256(x);
        const __m256i tiny = _mm256_cmpeq_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7f800000)), _mm256_setzero_si256());
        return _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_and_si256(tiny, _mm256_set1_epi32(0x7fffffff)), v));
    }
    // The bf16 mode's pair product step (vdpbf16ps, emulated): per lane, the second
    // elements' exact product added and rounded, then the first elements'; subnormal
    // inputs and results are zero.
    static reg dp(reg acc, ireg a, ireg b) {
        acc = flush(_mm256_fmadd_ps(flush(odd(a)), flush(odd(b)), acc));
        return flush(_mm256_fmadd_ps(flush(even(a)), flush(even(b)), acc));
    }
    // Nearest-even BF16 (kept as FP32) of finite lanes.
    static reg round_bf16(reg x) {
        const __m256i v = _mm256_castps_si256(x);
        const __m256i odd_bit = _mm256_and_si256(_mm256_srli_epi32(v, 16), _mm256_set1_epi32(1));
        const __m256i r = _mm256_add_epi32(v, _mm256_add_epi32(odd_bit, _mm256_set1_epi32(0x7fff)));
        return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
    }
    // Eight int8 as FP32 (exact).
    static reg load_v(const std::int8_t* p) {
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
    }
    static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
    static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
    static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
    static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
    static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
    static reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
    static reg round(reg x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    // 2^n for integral n in [-125, 0].
    static reg pow2(reg n) {
        const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
        return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
    }
    // Lanes [0, n) of v, `fill` in the others.
    static reg keep_first(reg v, int n, float fill) {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane));
        return _mm256_blendv_ps(_mm256_set1_ps(fill), v, keep);
    }
    static float hmax(reg v) {
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 0x55)));
    }
    // Sum of 16 lanes (two registers): lanes i + (i + 8), then the hsum tree.
    static float sum16(const reg* t) { return stored::hsum(_mm256_add_ps(t[0], t[1])); }
    static float first(reg v) { return _mm256_cvtss_f32(v); }
};

#include "model/cpu/attention_lanes.inc"

}  // namespace avx2

#pragma GCC push_options
#pragma GCC target("avx512f")
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized inside their own helpers.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace avx512 {

struct lanes {
    using reg = __m512;
    static constexpr int W = 16;
    static constexpr int k_acc = 16;  // accumulators per pass (32 registers)
    static reg zero() { return _mm512_setzero_ps(); }
    static reg set1(float x) { return _mm512_set1_ps(x); }
    using ireg = __m512i;
    static reg load(const float* p) { return _mm512_loadu_ps(p); }
    static ireg load_pairs(const kv_element* p) { return _mm512_loadu_si512(p); }
    static reg even(ireg v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }
    static reg odd(ireg v) { return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xffff0000u)))); }
    static ireg first_of_pairs(ireg v) { return _mm512_and_si512(v, _mm512_set1_epi32(0xffff)); }
    static ireg set1_pair(std::uint32_t x) { return _mm512_set1_epi32(static_cast<int>(x)); }
    static reg flush(reg x) {
        const __m512i v = _mm512_castps_si512(x);
        const __mmask16 tiny = _mm512_cmpeq_epi32_mask(_mm512_and_si512(v, _mm512_set1_epi32(0x7f800000)), _mm512_setzero_si512());
        return _mm512_castsi512_ps(_mm512_mask_and_epi32(v, tiny, v, _mm512_set1_epi32(static_cast<int>(0x80000000u))));
    }
    static reg dp(reg acc, ireg a, ireg b) {
        acc = flush(_mm512_fmadd_ps(flush(odd(a)), flush(odd(b)), acc));
        return flush(_mm512_fmadd_ps(flush(even(a)), flush(even(b)), acc));
    }
    static reg round_bf16(reg x) {
        const __m512i v = _mm512_castps_si512(x);
        const __m512i odd_bit = _mm512_and_si512(_mm512_srli_epi32(v, 16), _mm512_set1_epi32(1));
        const __m512i r = _mm512_add_epi32(v, _mm512_add_epi32(odd_bit, _mm512_set1_epi32(0x7fff)));
        return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
    }
    static reg load_v(const std::int8_t* p) {
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    }
    static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
    static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
    static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
    static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
    static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
    static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
    static reg round(reg x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    static reg pow2(reg n) {
        const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
        return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
    }
    static reg keep_first(reg v, int n, float fill) {
        const auto k = static_cast<__mmask16>(n <= 0 ? 0u : n >= 16 ? 0xffffu : (1u << n) - 1u);
        return _mm512_mask_blend_ps(k, _mm512_set1_ps(fill), v);
    }
    static float hmax(reg v) { return _mm512_reduce_max_ps(v); }
    static float sum16(const reg* t) {
        const __m256 lo = _mm512_castps512_ps256(t[0]);
        const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t[0]), 1));
        return stored::hsum(_mm256_add_ps(lo, hi));
    }
    static float first(reg v) { return _mm512_cvtss_f32(v); }
};

#include "model/cpu/attention_lanes.inc"

}  // namespace avx512

#pragma GCC diagnostic pop
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// AVX-512 with the BF16 dot-product instruction: the bf16 mode's native form.
namespace avx512bf16 {

struct lanes : avx512::lanes {
    static reg dp(reg acc, ireg a, ireg b) { return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b); }
};

#include "model/cpu/attention_lanes.inc"

}  // namespace avx512bf16

#pragma GCC diagnostic pop
#pragma GCC pop_options

std::atomic<bool> g_avx512_allowed{true};

// Rows per block of one sequence: up to 128 (row, query head) pairs share each
// page's loads (in chunks of 8). Fewer made the kernel wait on the cache: a
// 4,096-token, 8-KV-head layer ran at 19, 35, 46 and 50 GMAC per CPU-second with
// 8, 32, 64 and 128 pairs per block (one core does ~29 at its FMA peak).
constexpr std::int64_t k_pairs_per_block = 128;
std::int64_t rows_per_block(std::int64_t group) { return std::max<std::int64_t>(1, k_pairs_per_block / group); }

// Scratch of one thread: a block's pairs, queries, outputs and page scores.
struct block_scratch {
    std::vector<pair_state> pairs;
    simd_vector<float> q, o, s;
    simd_vector<std::uint16_t> qb;  // bf16 mode
    simd_vector<std::uint32_t> pp;  // bf16 mode
};

// The page_fn for the call's mode, value type and CPU.
page_fn pick_update(bool s8, bool bf16, bool avx512) {
    if (bf16 && avx512 && bf16_products_native()) return avx512bf16::pick(s8, true);
    return avx512 ? avx512::pick(s8, bf16) : avx2::pick(s8, bf16);
}

// A query in BF16 pairs for the bf16 mode: nearest even, subnormals to zero (as the
// instruction reads them).
void round_query_bf16(const float* q, std::int64_t n, std::uint16_t* out) {
    for (std::int64_t d = 0; d < n; ++d) {
        out[d] = f32_to_bf16(q[d]);
        if ((out[d] & 0x7f80u) == 0) out[d] &= 0x8000u;
    }
}

// Rows [i0, i1) of one cache against KV head kh.
void attend_block(const attention_args& a, std::span<const attention_row> rows, std::int64_t i0, std::int64_t i1,
                  std::int64_t kh, bool avx512) {
    thread_local block_scratch w;
    const kv_cache& kv = *rows[static_cast<std::size_t>(i0)].kv;
    const bool s8 = kv.v_dtype() == v_cache_dtype::s8;
    const bool bf16 = a.arith == arithmetic::bf16;
    const page_fn update = pick_update(s8, bf16, avx512);
    const std::int64_t hd = kv.head_dim(), stride = kv.head_stride(), g = a.group, n = (i1 - i0) * g;
    const auto qscale = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(hd)));
    w.pairs.resize(static_cast<std::size_t>(n));
    w.q.resize(static_cast<std::size_t>(n * hd));
    w.o.assign(static_cast<std::size_t>(n * stride), 0.0f);
    w.s.resize(static_cast<std::size_t>(n * k_kv_page_tokens));
    if (bf16) {
        w.qb.resize(static_cast<std::size_t>(n * hd));
        w.pp.resize(static_cast<std::size_t>(n * k_kv_page_tokens / 2));
    }
    std::int64_t first = rows[static_cast<std::size_t>(i0)].pos, last = first;
    for (std::int64_t i = i0; i < i1; ++i) {
        first = std::min(first, rows[static_cast<std::size_t>(i)].pos);
        last = std::max(last, rows[static_cast<std::size_t>(i)].pos);
        for (std::int64_t h = 0; h < g; ++h) {
            const std::int64_t p = (i - i0) * g + h;
            const float* q = a.q + i * a.ldq + (kh * g + h) * hd;
            float* qs = w.q.data() + p * hd;
            for (std::int64_t d = 0; d < hd; ++d) qs[d] = q[d] * qscale;
            pair_state& ps = w.pairs[static_cast<std::size_t>(p)];
            ps = {qs, nullptr, w.o.data() + p * stride, w.s.data() + p * k_kv_page_tokens, nullptr,
                  -std::numeric_limits<float>::infinity(), 0.0f, 0.0f};
            if (!bf16) continue;
            round_query_bf16(qs, hd, w.qb.data() + p * hd);
            ps.qb = reinterpret_cast<const std::uint32_t*>(w.qb.data() + p * hd);
            ps.pp = w.pp.data() + p * k_kv_page_tokens / 2;
        }
    }
    for (std::int64_t b = 0; b * k_kv_page_tokens <= last; ++b) {
        const kv_element* keys = kv.keys(a.layer, b, kh);
        const std::byte* values = kv.values(a.layer, b, kh);
        const float* scales = kv.value_scales(a.layer, b, kh);
        const std::int64_t start = b * k_kv_page_tokens;
        if (start + k_kv_page_tokens <= first + 1) {  // every row sees the whole page
            update(w.pairs.data(), static_cast<int>(n), static_cast<int>(k_kv_page_tokens), keys, values, scales, hd,
                   stride);
            continue;
        }
        for (std::int64_t i = i0; i < i1; ++i) {
            const std::int64_t count = std::min(k_kv_page_tokens, rows[static_cast<std::size_t>(i)].pos + 1 - start);
            if (count > 0)
                update(w.pairs.data() + (i - i0) * g, static_cast<int>(g), static_cast<int>(count), keys, values, scales,
                       hd, stride);
        }
    }
    for (std::int64_t p = 0; p < n; ++p) {
        const pair_state& ps = w.pairs[static_cast<std::size_t>(p)];
        float* out = a.out + (i0 + p / g) * a.ldo + (kh * g + p % g) * hd;
        for (std::int64_t d = 0; d < hd; ++d) out[d] = ps.o[d] / ps.l;
    }
}

}  // namespace

bool attention_avx512() { return g_avx512_allowed.load(std::memory_order_relaxed) && avx512_available(); }
void allow_attention_avx512(bool allowed) { g_avx512_allowed.store(allowed, std::memory_order_relaxed); }

void attend_causal(thread_pool& pool, const attention_args& a, std::span<const attention_row> rows) {
    // Blocks of consecutive rows of one cache, at most rows_per_block each.
    const std::int64_t per = rows_per_block(a.group);
    std::vector<std::int64_t> starts;
    for (std::size_t i = 0; i < rows.size(); ++i)
        if (starts.empty() || rows[i].kv != rows[i - 1].kv || static_cast<std::int64_t>(i) - starts.back() >= per)
            starts.push_back(static_cast<std::int64_t>(i));
    starts.push_back(static_cast<std::int64_t>(rows.size()));
    const auto blocks = static_cast<std::int64_t>(starts.size()) - 1;
    const std::int64_t heads = a.kv_end - a.kv_begin;
    const bool avx512 = attention_avx512();
    std::int64_t work = 0;  // multiply-adds, for the pool's inline threshold
    for (const auto& r : rows) work += (r.pos + 1) * 2 * a.group * heads * (r.kv ? r.kv->head_dim() : 0);
    // Items (block, KV head), later blocks (more keys) first so the last items claimed are short.
    pool.parallel_for(blocks * heads, 1, work, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t item = b; item < e; ++item) {
            const std::int64_t blk = blocks - 1 - item / heads, kh = a.kv_begin + item % heads;
            attend_block(a, rows, starts[static_cast<std::size_t>(blk)], starts[static_cast<std::size_t>(blk + 1)], kh,
                         avx512);
        }
    });
}

}  // namespace calserve::model
