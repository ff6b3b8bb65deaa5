#include "actors/liveness_policy.hpp"

namespace calserve::actors {

bool idle_is_stalled(const idle_input& in) {
    if (!in.device_up || in.awaiting_device_up || !in.slot_free) return false;
    if (in.job_in_flight || in.window_timer || in.awaiting > 0 || in.kv_out > 0) return false;
    return in.ready > 0;
}

}  // namespace calserve::actors
