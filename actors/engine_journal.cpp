#include "actors/engine_journal.hpp"

namespace calserve::actors {

std::string_view to_string(job_outcome o) {
    switch (o) {
        case job_outcome::ok: return "ok";
        case job_outcome::failed: return "failed";
        case job_outcome::lost: return "lost";
    }
    return "?";
}

void engine_journal::record_job(journal_job job) {
    std::lock_guard lock(mutex_);
    job.seq = next_job_++;
    if (jobs_.size() == k_journal_jobs) jobs_.pop_front();
    jobs_.push_back(job);
}

void engine_journal::record_device(std::int64_t at_ns, std::string_view from, std::string_view to, std::string note) {
    std::lock_guard lock(mutex_);
    if (device_events_.size() == k_journal_device_events) device_events_.pop_front();
    device_events_.push_back(journal_device_event{next_device_event_++, at_ns, std::string(from), std::string(to),
                                                  std::move(note)});
}

void engine_journal::set_slot(std::size_t slot, std::string_view state) {
    if (slot >= k_journal_slots) return;
    std::lock_guard lock(mutex_);
    if (slots_[slot] != state) slots_[slot] = std::string(state);
}

engine_journal::snapshot engine_journal::read(std::uint64_t since_job) const {
    snapshot s;
    std::lock_guard lock(mutex_);
    for (const auto& j : jobs_)
        if (j.seq > since_job) s.jobs.push_back(j);
    s.device_events.assign(device_events_.begin(), device_events_.end());
    s.slots = slots_;
    s.last_job = next_job_ - 1;
    return s;
}

}  // namespace calserve::actors
