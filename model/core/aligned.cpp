// Aligned byte regions; see aligned.hpp.
#include "model/core/aligned.hpp"

#include <sys/mman.h>

namespace calserve::model {

aligned_bytes make_aligned_bytes(std::size_t n) {
    if (n == 0) n = 1;
    const bool huge = n >= k_huge_page;
    const std::size_t alignment = huge ? k_huge_page : k_simd_alignment;
    void* p = boost::alignment::aligned_alloc(alignment, n);
    if (p == nullptr) throw std::bad_alloc();
    // Advice only: where transparent huge pages are off, the region keeps 4 KiB pages.
    if (huge) (void)::madvise(p, n - n % k_huge_page, MADV_HUGEPAGE);
    return aligned_bytes(static_cast<std::byte*>(p));
}

}  // namespace calserve::model
