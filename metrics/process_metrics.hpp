#pragma once
//! Process metrics with the standard Prometheus names (process_resident_memory_bytes,
//! process_open_fds, process_threads, process_cpu_seconds_total,
//! process_start_time_seconds), read from /proc/self when /metrics is rendered.
//!
//! Role: lets a long run (`calserve soak --real`, an operator's Prometheus) see the
//! daemon's memory, descriptor and thread counts next to its own metrics, so a leak
//! shows up as a slope.
//!
//! Fault model: reading /proc never fails a scrape. A file that cannot be read or
//! parsed leaves its metric at the last value read (0 before the first success).
//!
//! Invariants: the parsers are pure (text in, numbers out) and never trust field
//! counts: /proc/self/stat's command name may hold spaces and parentheses, so
//! fields are counted after the last ')'. process_cpu_seconds_total never goes down.
#include <cstdint>
#include <optional>
#include <string_view>

#include "metrics/metrics.hpp"

namespace calserve::metrics {

// The fields of /proc/<pid>/stat the collector uses (clock ticks as written there).
struct proc_stat_fields {
    std::uint64_t utime_ticks = 0;      // field 14
    std::uint64_t stime_ticks = 0;      // field 15
    std::int64_t num_threads = 0;       // field 20
    std::uint64_t starttime_ticks = 0;  // field 22, since boot
};
std::optional<proc_stat_fields> parse_proc_stat(std::string_view text);

// Resident pages: the second field of /proc/<pid>/statm.
std::optional<std::uint64_t> parse_statm_resident_pages(std::string_view text);

// Boot time (Unix seconds): the `btime` line of /proc/stat.
std::optional<std::uint64_t> parse_boot_time(std::string_view proc_stat_text);

struct process_sample {
    std::optional<double> resident_bytes;
    std::optional<double> open_fds;
    std::optional<double> threads;
    std::optional<double> cpu_seconds;
    std::optional<double> start_time_seconds;  // Unix time
    // Heap bytes the program holds (glibc mallinfo2: in-use chunks + mmapped blocks). Beside
    // the resident size it tells retained memory from pages the allocator keeps.
    std::optional<double> heap_bytes;
};

// Reads the calling process's numbers from /proc/self (empty fields: unreadable).
process_sample read_process_sample();

// Adds the six process_* families to `r` and a collector that refreshes them
// from /proc/self at every render. Call once per registry.
void install_process_metrics(registry& r);

}  // namespace calserve::metrics
