// Simulated NPU: KV allocate / apply / free / clear / canAllocate. Capacity checks
// never wait; the kv_apply_stall fault models the production busy-wait, bounded.
#include <algorithm>

#include "device/sim/sim_device.hpp"

namespace calserve::device::sim {

namespace {
fault_site kv_site(std::uint32_t chips, seq_id seq) { return fault_site{(1u << chips) - 1u, {}, seq, {}}; }
}  // namespace

// Freeing is host-side bookkeeping: allowed on a faulted device, not on a lost one.
void_result sim_device::check_kv_bookkeeping() const {
    if (state_ == device_state::faulted) return {};
    return check_usable(false);
}

bool sim_device::kv_can_allocate(std::int64_t tokens) const {
    std::lock_guard lock(mutex_);
    return check_usable(false).ok() && kv_->can_allocate(tokens);
}

void_result sim_device::kv_allocate(seq_id sequence, std::int64_t reserve_tokens) {
    std::lock_guard lock(mutex_);
    if (auto r = check_usable(false); !r) return r;
    if (options_.faults->check(fault_point::kv_alloc_fail, kv_site(spec_.chip_count, sequence)))
        return make_error(status::kv_full, "injected kv_alloc_fail");
    if (auto r = kv_->allocate(sequence, reserve_tokens); !r) return note_misuse(r, "kv_allocate");
    seq_length_[sequence] = 0;
    return {};
}

void_result sim_device::kv_apply(seq_id sequence, std::int64_t total_tokens, timeout limit) {
    struct stall {
        double ms = 0;
        bool outlives_limit = false;
    } st;
    {
        std::lock_guard lock(mutex_);
        if (auto r = check_usable(false); !r) return r;
        const auto site = kv_site(spec_.chip_count, sequence);
        if (options_.faults->check(fault_point::kv_alloc_fail, site))
            return make_error(status::kv_full, "injected kv_alloc_fail");
        if (auto fire = options_.faults->check(fault_point::kv_apply_stall, site)) {
            // delay_ms 0 = stall forever (the production busy-wait), cut at the caller's bound.
            const double limit_ms = std::chrono::duration<double, std::milli>(limit).count();
            st.outlives_limit = fire->delay_ms <= 0 || fire->delay_ms >= limit_ms;
            st.ms = st.outlives_limit ? limit_ms : fire->delay_ms;
        }
    }
    pause(st.ms);
    if (st.outlives_limit) return make_error(status::kv_full, "injected kv_apply_stall: no KV within the apply timeout");
    std::lock_guard lock(mutex_);
    if (auto r = check_usable(false); !r) return r;
    return note_misuse(kv_->apply(sequence, total_tokens), "kv_apply");
}

void_result sim_device::kv_free(seq_id sequence) {
    {
        std::lock_guard lock(mutex_);
        if (auto r = check_kv_bookkeeping(); !r) return r;
        for (const auto& j : in_flight_) {
            if (std::find(j->rows.begin(), j->rows.end(), sequence) != j->rows.end())
                return make_error(status::invalid_argument, "sequence " + std::to_string(sequence) +
                                                                " has a job in flight; free it after completion");
        }
        if (auto r = kv_->free(sequence); !r) return r;
        seq_length_.erase(sequence);
    }
    // Behind any queued compute (FIFO), so a reused id starts from an empty model state.
    post_model_task([this, sequence] {
        std::lock_guard model_lock(model_mutex_);
        model_->free_sequence(sequence);
    });
    return {};
}

void_result sim_device::kv_clear() {
    {
        std::lock_guard lock(mutex_);
        if (auto r = check_kv_bookkeeping(); !r) return r;
        if (!in_flight_.empty()) return make_error(status::invalid_argument, "jobs in flight; clear KV when idle");
        kv_->clear();
        seq_length_.clear();
    }
    post_model_task([this] {
        std::lock_guard model_lock(model_mutex_);
        model_->free_all();
    });
    return {};
}

// Seq copy: capacity for `dst` as kv_apply takes it, the copy priced as DRAM traffic on
// the compute engine (it runs between jobs), the numbers copied behind queued compute.
void_result sim_device::kv_copy(seq_id src, seq_id dst, std::int64_t tokens) {
    {
        std::lock_guard lock(mutex_);
        if (auto r = check_usable(true); !r) return r;
        if (src == dst) return make_error(status::invalid_argument, "kv_copy: source and destination are one sequence");
        if (!kv_->contains(src))
            return note_misuse(make_error(status::unknown_sequence, "KV sequence " + std::to_string(src)), "kv_copy source");
        if (!kv_->contains(dst))
            return note_misuse(make_error(status::unknown_sequence, "KV sequence " + std::to_string(dst)), "kv_copy");
        if (tokens <= 0 || tokens > seq_length_[src])
            return make_error(status::invalid_argument, "kv_copy: sequence " + std::to_string(src) + " holds " +
                                                            std::to_string(seq_length_[src]) + " tokens, not " +
                                                            std::to_string(tokens));
        if (seq_length_[dst] != 0)
            return make_error(status::invalid_argument, "kv_copy: sequence " + std::to_string(dst) + " is not empty");
        for (const auto& j : in_flight_)
            if (std::find(j->rows.begin(), j->rows.end(), dst) != j->rows.end())
                return make_error(status::invalid_argument, "kv_copy: sequence " + std::to_string(dst) + " has a job in flight");
        if (options_.faults->check(fault_point::kv_copy_fail, kv_site(spec_.chip_count, dst)))
            return make_error(status::kv_full, "injected kv_copy_fail");
        if (auto r = kv_->apply(dst, tokens); !r) return r;
        seq_length_[dst] = tokens;
        const std::int64_t now = options_.scheduler->now().count();
        const auto copy_ns = std::int64_t(latency_->kv_copy_ms(tokens) * 1e6);
        compute_free_ns_ = std::max(now, compute_free_ns_) + copy_ns;
        compute_busy_ns_ += copy_ns;
    }
    post_model_task([this, src, dst, tokens] {
        std::lock_guard model_lock(model_mutex_);
        (void)model_->copy_prefix(src, dst, tokens);
    });
    return {};
}

void_result sim_device::kv_keep(seq_id sequence, std::int64_t tokens) {
    {
        std::lock_guard lock(mutex_);
        if (auto r = check_usable(false); !r) return r;
        if (!kv_->contains(sequence))
            return note_misuse(make_error(status::unknown_sequence, "KV sequence " + std::to_string(sequence)), "kv_keep");
        if (tokens < 0 || tokens > seq_length_[sequence])
            return make_error(status::invalid_argument, "kv_keep: sequence " + std::to_string(sequence) + " holds " +
                                                            std::to_string(seq_length_[sequence]) + " tokens, not " +
                                                            std::to_string(tokens));
        for (const auto& j : in_flight_)
            if (std::find(j->rows.begin(), j->rows.end(), sequence) != j->rows.end())
                return make_error(status::invalid_argument, "kv_keep: sequence " + std::to_string(sequence) +
                                                                " has a job in flight");
        if (auto r = kv_->keep(sequence, tokens); !r) return r;
        seq_length_[sequence] = tokens;
    }
    post_model_task([this, sequence, tokens] {
        std::lock_guard model_lock(model_mutex_);
        (void)model_->truncate(sequence, tokens);
    });
    return {};
}

void_result sim_device::note_misuse(void_result r, std::string_view call) {
    if (!r && (r.code() == status::unknown_sequence || r.code() == status::sequence_exists)) {
        ++misuse_.count;
        misuse_.last = std::string(call) + ": " + r.error().what();
    }
    return r;
}

sim_device::sequence_misuse sim_device::sequence_misuses() const {
    std::lock_guard lock(mutex_);
    return misuse_;
}

kv_usage sim_device::kv() const {
    std::lock_guard lock(mutex_);
    return kv_ ? kv_->usage() : kv_usage{};
}

std::int64_t sim_device::kv_length(seq_id sequence) const {
    std::lock_guard lock(mutex_);
    auto it = seq_length_.find(sequence);
    return it == seq_length_.end() ? 0 : it->second;
}

}  // namespace calserve::device::sim
