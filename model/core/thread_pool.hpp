#pragma once
//! A small persistent thread pool for the transformer's data-parallel loops.
//!
//! Role: split a range [0, n) into blocks and run a function on each, the
//! calling thread working too. Workers are created once (decode calls the pool
//! ~200 times per token, so per-call thread creation would dominate) and spin
//! briefly before sleeping, because the gap between two matvecs is microseconds.
//!
//! Blocks are claimed dynamically, so on a loaded machine a worker that is not
//! scheduled in time costs nothing: the caller takes its blocks. Loops whose
//! total work is below a threshold run inline (waking a thread costs more).
//!
//! Fault model: the function must not throw (kernels do not). Invariants: one
//! `parallel_for` at a time per pool (the transformer is not re-entrant);
//! `parallel_for` returns only after every block has finished, and no worker
//! touches a job after its caller returned.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace calserve::model {

class thread_pool {
public:
    using block_fn = std::function<void(std::int64_t, std::int64_t)>;

    explicit thread_pool(int threads);
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int size() const { return static_cast<int>(workers_.size()) + 1; }

    // Runs fn(begin, end) over blocks covering [0, n); block starts are multiples of
    // `grain`. `work` estimates the loop's cost (e.g. multiply-adds); small loops run inline.
    void parallel_for(std::int64_t n, std::int64_t grain, std::int64_t work, const block_fn& fn);

private:
    struct job {
        const block_fn* fn = nullptr;  // null when no job is open
        std::int64_t n = 0, block = 0, blocks = 0, next = 0, done = 0;
    };
    void worker_loop();
    // Claims and runs blocks of the open job until none are left.
    void help();

    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable wake_;
    std::atomic<std::uint64_t> generation_{0};
    std::atomic<std::int64_t> done_{0};
    bool stop_ = false;
    job job_;
};

}  // namespace calserve::model
