#pragma once
//! Aligned storage for what the SIMD kernels stream: 64-byte lines, huge pages for weights.
//!
//! Role: the weight data regions and the forward pass's activation buffers start on a
//! cache line, so a 512-bit load of a row (whose stride is a multiple of 64 bytes in
//! every shape we serve) never straddles two lines. With the default 16-byte
//! alignment of `new`, every activation load of the batched BF16 kernel was a split
//! load: a B4 decode step ran ~1.5x slower (measured in bench_model).
#include <boost/align/aligned_alloc.hpp>
#include <boost/align/aligned_allocator.hpp>

#include <cstddef>
#include <memory>
#include <new>
#include <vector>

namespace calserve::model {

constexpr std::size_t k_simd_alignment = 64;  // one cache line, one 512-bit register
constexpr std::size_t k_huge_page = 2u << 20;

template <class T>
using simd_vector = std::vector<T, boost::alignment::aligned_allocator<T, k_simd_alignment>>;

struct aligned_bytes_deleter {
    void operator()(std::byte* p) const noexcept { boost::alignment::aligned_free(p); }
};
using aligned_bytes = std::unique_ptr<std::byte[], aligned_bytes_deleter>;

// n uninitialised bytes (at least one) on a k_simd_alignment boundary; throws std::bad_alloc as `new` does.
// Regions of k_huge_page bytes or more (weights) start on a huge-page boundary and ask the kernel for
// transparent huge pages: one TLB entry per 2 MiB instead of per 4 KiB while a decode step streams every
// weight, and hardware prefetch streams are not cut at every 4 KiB page.
aligned_bytes make_aligned_bytes(std::size_t n);

}  // namespace calserve::model
