#pragma once
//! engine_journal: a bounded record of what the engine did lately, for the web
//! console's engine view (net/console_state.cpp): the last device jobs of each
//! ChipSession slot (ping/pong) with their fill, device-done and free times, the
//! slots' current states, and the DeviceActor's recent state transitions with the
//! fault that caused each recovery.
//!
//! Threading: written by the ChipSession and the DeviceActor on their strands,
//! read by network threads; one mutex guards everything and is held only to copy
//! a few small records, never across I/O or device calls.
//! Invariants: at most k_journal_jobs jobs and k_journal_device_events transitions
//! are kept (the oldest drop out); sequence numbers start at 1 and grow by one
//! per record, so a reader asks for what is newer than the last one it saw.
#include <array>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace calserve::actors {

inline constexpr std::size_t k_journal_jobs = 256;
inline constexpr std::size_t k_journal_device_events = 64;
inline constexpr std::size_t k_journal_slots = 2;  // ping, pong

enum class job_outcome : std::uint8_t { ok, failed, lost };
std::string_view to_string(job_outcome o);

// One device job, recorded when its slot is freed. Times: runtime clock, ns.
struct journal_job {
    std::uint64_t seq = 0;
    std::uint8_t slot = 0;               // 0 = ping, 1 = pong
    bool prefill = false;
    std::int64_t rows = 0;               // live rows (a prefill has one)
    std::int64_t profile = 0;            // batch of the program that ran it (0 = never filled)
    std::int64_t tokens = 0;             // tokens fed (prompt tokens of a prefill, rows of a decode)
    std::int64_t start_ns = 0;           // the slot took the job
    std::int64_t device_done_ns = 0;     // logits copied out (0 = never finished on the device)
    std::int64_t end_ns = 0;             // the slot was freed
    job_outcome outcome = job_outcome::ok;
};

// A DeviceActor state transition; `note` is the fault or reset reason, if any.
struct journal_device_event {
    std::uint64_t seq = 0;
    std::int64_t at_ns = 0;
    std::string from, to, note;
};

class engine_journal {
public:
    void record_job(journal_job job);
    void record_device(std::int64_t at_ns, std::string_view from, std::string_view to, std::string note = {});
    // The slot states right now (names from chip_session_actor's to_string).
    void set_slot(std::size_t slot, std::string_view state);

    struct snapshot {
        std::vector<journal_job> jobs;                    // with seq > since_job, oldest first
        std::vector<journal_device_event> device_events;  // all kept, oldest first
        std::array<std::string, k_journal_slots> slots;
        std::uint64_t last_job = 0;                       // seq of the newest job recorded (= jobs recorded)
    };
    snapshot read(std::uint64_t since_job) const;

private:
    mutable std::mutex mutex_;
    std::deque<journal_job> jobs_;                       // guarded; size <= k_journal_jobs
    std::deque<journal_device_event> device_events_;     // guarded; size <= k_journal_device_events
    std::array<std::string, k_journal_slots> slots_{"free", "free"};
    std::uint64_t next_job_ = 1, next_device_event_ = 1;
};

}  // namespace calserve::actors
