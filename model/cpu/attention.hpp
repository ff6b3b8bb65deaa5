#pragma once
//! Causal grouped-query attention over a paged KV cache (the CPU backend's attention).
//!
//! Role: for every row (a token at position `pos` of a sequence) and query head,
//! softmax(q . K[0..pos] / sqrt(d)) . V[0..pos], blocked over keys with an online
//! softmax, vectorised across keys (scores) and across the head dimension (the
//! weighted sum of values), the query heads of one KV head sharing every key and
//! value load, and for prefill several rows of one sequence sharing them too.
//!
//! The one reduction order (what makes decode, batched decode, prefill and
//! resumed prefill give a row the same bits): keys are taken in pages of
//! k_kv_page_tokens (64) from position 0, and for each page the row's numbers
//! depend only on its query, the page's keys and values it sees, and its count:
//!  - score of key j: one FMA chain over d = 0..head_dim-1 in order, on q
//!    pre-multiplied by log2(e) / sqrt(d); keys past the row's position are -inf;
//!  - m' = max(m, max of the page's scores) (exact in any order);
//!  - p_j = exp2(s_j - m') by one fixed polynomial (0 past the position);
//!    the page's sum is the 64 lanes reduced as four 16-key tiles added
//!    ((t0 + t1) + (t2 + t3)), then lanes i + (i + 8), then the hsum tree of
//!    model/weights/stored_rows.hpp;
//!  - alpha = exp2(m - m'), l = fma(l, alpha, sum), o[d] = o[d] * alpha, then
//!    o[d] = fma(p_j, v_j[d], o[d]) for the keys j of the page in order;
//!  - after the last page, out[d] = o[d] / l.
//! In the bf16 arithmetic mode (attention_args::arith) three steps change, on every
//! path alike: the scaled query is rounded to BF16 (nearest even, subnormals to zero)
//! and a score is one vdpbf16ps chain over the dimension pairs (2i, 2i + 1) in order
//! (per pair: the odd product added and rounded, then the even one; kernels.hpp);
//! each p_j is rounded to BF16 before the page's sum and the value pass; and
//! o[d] = flush(o[d] * alpha), then one pair step per two keys (2i, 2i + 1) in order
//! on (p_2i, p_2i+1) and (v_2i[d], v_2i+1[d]), the second value masked to zero when
//! the row's count ends at 2i. The S8 V-cache keeps the FP32 value pass (on the
//! rounded p). Native vdpbf16ps, its AVX-512F and its AVX2 emulation give the same bits.
//! Which rows share a call, how rows are grouped into blocks, how pages and heads
//! are split across threads and whether the AVX-512 or the AVX2 form runs change
//! none of these steps (tests compare the bits).
//!
//! KV cache: keys stored as BF16 (rounded to nearest even by model/core/bf16.hpp's
//! f32_to_bf16, widened exactly when read), half the bytes of FP32; values as BF16
//! too, or, in the S8 V-cache mode (`v_cache_dtype::s8`), as int8 with one FP32
//! scale per (page, KV head, position): v[d] ~ scale * q[d], scale = max|v| / 127,
//! q[d] = round-to-nearest-even(v[d] * (127 / max|v|)) in [-127, 127] (all zero
//! when v is). A position's stored value depends on its own vector only, never on
//! its neighbours in the page, so the cache a position gets is the same whether it
//! was written by a prefill, a resumed prefill chunk, a decode step or a copy
//! (what the exactness guarantees need; a per-page scale would change with every
//! token written into the page). Dequantisation happens in the kernel's value pass:
//! int8 lanes are widened to FP32 (exact) and the position's scale is folded into
//! its probability, o[d] = fma(p_j * scale_j, q_j[d], o[d]); the softmax sum l
//! uses p_j unscaled. Layout (per sequence, per layer, one page per 64 positions,
//! zeroed when allocated): keys in dimension pairs, `[kv_head][d / 2][64 keys][2]`,
//! so one load is 16 keys' (d, d + 1) pairs; BF16 values in key pairs,
//! `[kv_head][32][head_stride][2]`, so one load is 16 dimensions of keys (2i, 2i + 1)
//! (the operands vdpbf16ps pairs; the fp32 mode splits a pair by shift and mask);
//! S8 values `[kv_head][64 keys][head_stride]` int8; head_stride = head_dim rounded up
//! to 16 (zero padding); S8 scales `[kv_head][64]` FP32. head_dim must be even.
//!
//! Fault model: none at run time; callers size the cache (`reserve`) before they
//! store or attend, and the row's positions [0, pos] must have been stored.
#include <cstdint>
#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "model/core/aligned.hpp"
#include "model/core/thread_pool.hpp"
#include "model/cpu/kernels.hpp"

namespace calserve::model {

constexpr std::int64_t k_kv_page_tokens = 64;  // keys per page = the online softmax's block
constexpr std::int64_t k_kv_lane_pad = 16;     // head_stride is a multiple of this

// What one cached key (and, in the BF16 V mode, value) element is stored as: BF16.
using kv_element = std::uint16_t;

// How the cache stores values (keys are BF16 in both).
enum class v_cache_dtype : std::uint8_t { bf16, s8 };
std::string_view to_string(v_cache_dtype v);

// One sequence's keys and values, every layer.
class kv_cache {
public:
    // Grows the cache to hold `positions` (never shrinks); the shape and the value
    // dtype are fixed by the first call.
    void reserve(std::int64_t layers, std::int64_t kv_heads, std::int64_t head_dim, std::int64_t positions,
                 v_cache_dtype v_dtype = v_cache_dtype::bf16);
    // Stores the key and value of one KV head at `pos` (< capacity()).
    void store(std::int64_t layer, std::int64_t pos, std::int64_t kv_head, const float* k, const float* v);

    // Becomes the first `positions` of `src` (pages past them not allocated; the rest of
    // the last page zero, as a fresh page is).
    void copy_prefix(const kv_cache& src, std::int64_t positions);
    // Keeps the first `positions`: later pages are released, the rest of the last page zeroed.
    void truncate(std::int64_t positions);

    std::int64_t capacity() const { return pages_.empty() ? 0 : static_cast<std::int64_t>(pages_[0].size()) * k_kv_page_tokens; }
    std::int64_t head_dim() const { return head_dim_; }
    std::int64_t head_stride() const { return head_stride_; }
    v_cache_dtype v_dtype() const { return v_dtype_; }
    // Bytes allocated for keys, values and value scales.
    std::int64_t bytes() const;

    // [head_dim / 2][64][2]: key j of the page, dimension d at (d / 2 * 64 + j) * 2 + d % 2.
    const kv_element* keys(std::int64_t layer, std::int64_t page, std::int64_t kv_head) const {
        return reinterpret_cast<const kv_element*>(page_data(layer, page) + key_offset(kv_head));
    }
    // BF16: [32][head_stride][2], value j of the page, dimension d at (j / 2 * head_stride + d) * 2 + j % 2;
    // S8: [64][head_stride] int8, value j at j * head_stride.
    const std::byte* values(std::int64_t layer, std::int64_t page, std::int64_t kv_head) const {
        return page_data(layer, page) + value_offset(kv_head);
    }
    // [64]: the scale of value j of the page (S8 only; nullptr in BF16).
    const float* value_scales(std::int64_t layer, std::int64_t page, std::int64_t kv_head) const {
        return v_dtype_ == v_cache_dtype::s8
                   ? reinterpret_cast<const float*>(page_data(layer, page) + scale_offset(kv_head))
                   : nullptr;
    }

private:
    const std::byte* page_data(std::int64_t layer, std::int64_t page) const {
        return pages_[static_cast<std::size_t>(layer)][static_cast<std::size_t>(page)].data();
    }
    std::int64_t v_bytes() const { return v_dtype_ == v_cache_dtype::s8 ? 1 : 2; }
    std::int64_t key_offset(std::int64_t kh) const {
        return kh * head_dim_ * k_kv_page_tokens * static_cast<std::int64_t>(sizeof(kv_element));
    }
    std::int64_t value_offset(std::int64_t kh) const {
        return key_offset(kv_heads_) + kh * head_stride_ * k_kv_page_tokens * v_bytes();
    }
    std::int64_t scale_offset(std::int64_t kh) const {
        return value_offset(kv_heads_) + kh * k_kv_page_tokens * static_cast<std::int64_t>(sizeof(float));
    }
    std::int64_t page_bytes() const { return v_dtype_ == v_cache_dtype::s8 ? scale_offset(kv_heads_) : value_offset(kv_heads_); }

    // Element indices of key / value (position j of the page, dimension d) in a head's block.
    static std::int64_t key_index(std::int64_t j, std::int64_t d) { return (d / 2 * k_kv_page_tokens + j) * 2 + d % 2; }
    std::int64_t value_index(std::int64_t j, std::int64_t d) const { return (j / 2 * head_stride_ + d) * 2 + j % 2; }

    std::int64_t kv_heads_ = 0, head_dim_ = 0, head_stride_ = 0;
    v_cache_dtype v_dtype_ = v_cache_dtype::bf16;
    std::vector<std::vector<simd_vector<std::byte>>> pages_;  // [layer][page]
};

// A row of an attention call: it sees positions [0, pos] of `kv`.
struct attention_row {
    const kv_cache* kv = nullptr;
    std::int64_t pos = 0;
};

// The heads one call covers and where queries and outputs live. Query head h of
// row i is at q + i * ldq + h * head_dim (its output likewise in `out`); query
// head h reads KV head h / group; KV heads [kv_begin, kv_end) are computed.
struct attention_args {
    std::int64_t layer = 0;
    std::int64_t kv_begin = 0, kv_end = 0;
    std::int64_t group = 1;
    const float* q = nullptr;
    std::int64_t ldq = 0;
    float* out = nullptr;
    std::int64_t ldo = 0;
    arithmetic arith = arithmetic::fp32;  // bf16: the products of attention.hpp's bf16 mode
};

// Causal attention of every row; rows of the same cache next to each other in
// `rows` (a prefill) share key and value loads. Parallel over (row block, KV head).
void attend_causal(thread_pool& pool, const attention_args& a, std::span<const attention_row> rows);

// Whether attention runs its AVX-512 form (on a CPU with AVX-512F unless
// disallowed). Both forms give the same bits; tests compare them.
bool attention_avx512();
void allow_attention_avx512(bool allowed);

}  // namespace calserve::model
