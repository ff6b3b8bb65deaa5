// Persistent fork-join pool with dynamically claimed blocks; see kernels_pool.hpp.
#include "model/core/thread_pool.hpp"

#include <algorithm>
#include <immintrin.h>

namespace calserve::model {
namespace {
constexpr int k_spin_iterations = 4000;          // a few microseconds before sleeping / yielding
constexpr std::int64_t k_min_parallel_work = 1 << 16;  // below this, waking a thread costs more
constexpr std::int64_t k_blocks_per_thread = 4;
}  // namespace

thread_pool::thread_pool(int threads) {
    const int extra = std::max(threads, 1) - 1;
    for (int i = 0; i < extra; ++i) workers_.emplace_back([this] { worker_loop(); });
}

thread_pool::~thread_pool() {
    {
        std::lock_guard lock(mu_);
        stop_ = true;
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
}

void thread_pool::help() {
    for (;;) {
        std::int64_t begin = 0, end = 0;
        const block_fn* fn = nullptr;
        {
            std::lock_guard lock(mu_);
            if (job_.fn == nullptr || job_.next >= job_.blocks) return;
            const std::int64_t b = job_.next++;
            begin = b * job_.block;
            end = std::min(job_.n, begin + job_.block);
            fn = job_.fn;
        }
        (*fn)(begin, end);
        done_.fetch_add(1, std::memory_order_acq_rel);
    }
}

void thread_pool::parallel_for(std::int64_t n, std::int64_t grain, std::int64_t work, const block_fn& fn) {
    if (n <= 0) return;
    grain = std::max<std::int64_t>(grain, 1);
    if (workers_.empty() || n <= grain || work < k_min_parallel_work) {
        fn(0, n);
        return;
    }
    const std::int64_t units = (n + grain - 1) / grain;
    const std::int64_t blocks = std::min<std::int64_t>(units, size() * k_blocks_per_thread);
    const std::int64_t block = (units + blocks - 1) / blocks * grain;
    const std::int64_t count = (n + block - 1) / block;
    {
        std::lock_guard lock(mu_);
        job_ = job{&fn, n, block, count, 0, 0};
        done_.store(0, std::memory_order_relaxed);
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    help();
    for (int spins = 0; done_.load(std::memory_order_acquire) != count; ++spins) {
        if (spins < k_spin_iterations) _mm_pause();
        else std::this_thread::yield();
    }
    std::lock_guard lock(mu_);
    job_.fn = nullptr;  // closed: a late worker finds nothing to claim
}

void thread_pool::worker_loop() {
    std::uint64_t seen = 0;
    for (;;) {
        for (int spins = 0; generation_.load(std::memory_order_acquire) == seen && spins < k_spin_iterations; ++spins)
            _mm_pause();
        {
            std::unique_lock lock(mu_);
            wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
            seen = generation_.load(std::memory_order_acquire);
            if (stop_) return;
        }
        help();
    }
}

}  // namespace calserve::model
