#include "net/tokenize_pool.hpp"

#include <pthread.h>

namespace calserve::net {

tokenize_pool::tokenize_pool(std::size_t threads, std::size_t queue_bound, metrics::calserve_metrics* metrics)
    : capacity_(queue_bound + std::max<std::size_t>(threads, 1)), metrics_(metrics) {
    work_.emplace(io_.get_executor());
    for (std::size_t i = 0; i < std::max<std::size_t>(threads, 1); ++i) {
        threads_.emplace_back([this] {
            ::pthread_setname_np(::pthread_self(), "cs-tokenize");
            io_.run();
        });
    }
}

tokenize_pool::~tokenize_pool() {
    work_.reset();
    io_.stop();
    for (auto& t : threads_) t.join();
}

bool tokenize_pool::try_enter() {
    auto n = queued_.load();
    do {
        if (n >= capacity_) return false;
    } while (!queued_.compare_exchange_weak(n, n + 1));
    if (metrics_) metrics_->tokenize_queue.set(double(n + 1));
    return true;
}

void tokenize_pool::leave() {
    auto n = queued_.fetch_sub(1) - 1;
    if (metrics_) {
        metrics_->tokenize_jobs.inc();
        metrics_->tokenize_queue.set(double(n));
    }
}

}  // namespace calserve::net
