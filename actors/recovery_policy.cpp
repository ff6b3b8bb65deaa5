#include "actors/recovery_policy.hpp"

#include <algorithm>

namespace calserve::actors {

namespace {
constexpr int k_max_doublings = 20;  // 2^20 x any base is past any sane cap or retry
}

bool retries_job(fault_class cls, int attempt, int retry_limit) {
    return (cls == fault_class::retryable || cls == fault_class::capacity) && attempt < retry_limit;
}

bool retries_golden(fault_class cls, int attempt, int retry_limit) {
    return cls == fault_class::retryable && attempt < retry_limit;
}

std::chrono::nanoseconds retry_delay(std::chrono::nanoseconds base, int attempt) {
    return base * (std::int64_t{1} << std::clamp(attempt, 0, k_max_doublings));
}

reset_next next_reset(int failed_resets, int reset_limit) {
    if (failed_resets > reset_limit) return reset_next::give_up;
    return failed_resets == 0 ? reset_next::attempt_now : reset_next::attempt_after_backoff;
}

std::chrono::nanoseconds reset_backoff_ceiling(const reset_backoff_params& p, int failed_resets) {
    if (p.base.count() <= 0 || failed_resets <= 0) return std::chrono::nanoseconds{0};
    const int doublings = std::min(failed_resets - 1, k_max_doublings);
    return std::min(p.base * (std::int64_t{1} << doublings), p.max);
}

}  // namespace calserve::actors
