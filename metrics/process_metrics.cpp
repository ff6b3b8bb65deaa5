// Process metrics from /proc/self, refreshed at render time (see process_metrics.hpp).
#include "metrics/process_metrics.hpp"

#include <charconv>
#include <dirent.h>
#include <fstream>
#include <iterator>
#include <malloc.h>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace calserve::metrics {
namespace {

template <class T>
std::optional<T> to_number(std::string_view s) {
    T v{};
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
    return v;
}

// Whitespace-separated fields of `text`, in order.
std::vector<std::string_view> fields_of(std::string_view text) {
    std::vector<std::string_view> out;
    std::size_t i = 0;
    while (i < text.size()) {
        while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t')) ++i;
        std::size_t j = i;
        while (j < text.size() && text[j] != ' ' && text[j] != '\n' && text[j] != '\t') ++j;
        if (j > i) out.push_back(text.substr(i, j - i));
        i = j;
    }
    return out;
}

std::optional<std::string> slurp(const char* path) {
    std::ifstream in(path);
    if (!in) return std::nullopt;
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::optional<double> count_open_fds() {
    DIR* d = ::opendir("/proc/self/fd");
    if (d == nullptr) return std::nullopt;
    double n = 0;
    while (const dirent* e = ::readdir(d)) {
        if (e->d_name[0] != '.') ++n;
    }
    ::closedir(d);
    return n - 1;  // the listing's own descriptor
}

}  // namespace

std::optional<proc_stat_fields> parse_proc_stat(std::string_view text) {
    const auto close = text.rfind(')');
    if (close == std::string_view::npos) return std::nullopt;
    // After "pid (comm)" comes field 3 (state); field k is at index k - 3.
    const auto f = fields_of(text.substr(close + 1));
    if (f.size() < 20) return std::nullopt;
    auto utime = to_number<std::uint64_t>(f[14 - 3]);
    auto stime = to_number<std::uint64_t>(f[15 - 3]);
    auto threads = to_number<std::int64_t>(f[20 - 3]);
    auto start = to_number<std::uint64_t>(f[22 - 3]);
    if (!utime || !stime || !threads || !start) return std::nullopt;
    return proc_stat_fields{*utime, *stime, *threads, *start};
}

std::optional<std::uint64_t> parse_statm_resident_pages(std::string_view text) {
    const auto f = fields_of(text);
    if (f.size() < 2) return std::nullopt;
    return to_number<std::uint64_t>(f[1]);
}

std::optional<std::uint64_t> parse_boot_time(std::string_view proc_stat_text) {
    std::size_t pos = 0;
    while (pos < proc_stat_text.size()) {
        auto eol = proc_stat_text.find('\n', pos);
        auto line = proc_stat_text.substr(pos, eol == std::string_view::npos ? std::string_view::npos : eol - pos);
        if (line.starts_with("btime ")) {
            const auto f = fields_of(line);
            return f.size() == 2 ? to_number<std::uint64_t>(f[1]) : std::nullopt;
        }
        if (eol == std::string_view::npos) break;
        pos = eol + 1;
    }
    return std::nullopt;
}

process_sample read_process_sample() {
    process_sample s;
    const long page = ::sysconf(_SC_PAGESIZE);
    const long ticks = ::sysconf(_SC_CLK_TCK);
    if (auto statm = slurp("/proc/self/statm"); statm && page > 0) {
        if (auto pages = parse_statm_resident_pages(*statm)) s.resident_bytes = double(*pages) * double(page);
    }
    s.open_fds = count_open_fds();
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    const struct mallinfo2 mi = ::mallinfo2();
    s.heap_bytes = double(mi.uordblks) + double(mi.hblkhd);
#endif
    if (auto stat = slurp("/proc/self/stat"); stat && ticks > 0) {
        if (auto f = parse_proc_stat(*stat)) {
            s.threads = double(f->num_threads);
            s.cpu_seconds = double(f->utime_ticks + f->stime_ticks) / double(ticks);
            static const std::optional<std::uint64_t> boot = [] {
                auto all = slurp("/proc/stat");
                return all ? parse_boot_time(*all) : std::nullopt;
            }();
            if (boot) s.start_time_seconds = double(*boot) + double(f->starttime_ticks) / double(ticks);
        }
    }
    return s;
}

void install_process_metrics(registry& r) {
    auto& rss = r.add_gauge("process_resident_memory_bytes", "Resident memory size in bytes.").get();
    auto& fds = r.add_gauge("process_open_fds", "Number of open file descriptors.").get();
    auto& threads = r.add_gauge("process_threads", "Number of OS threads in the process.").get();
    auto& heap = r.add_gauge("process_heap_bytes", "Heap bytes in use by the program (malloc in-use chunks and mmapped blocks).").get();
    auto& cpu = r.add_counter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.").get();
    auto& start = r.add_gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.")
                      .get();
    // The counter only moves forward by increments: concurrent scrapes take turns so
    // the same CPU time is never added twice.
    auto cpu_mutex = std::make_shared<std::mutex>();
    r.add_collector([&rss, &heap, &fds, &threads, &cpu, &start, cpu_mutex] {
        const auto s = read_process_sample();
        if (s.resident_bytes) rss.set(*s.resident_bytes);
        if (s.heap_bytes) heap.set(*s.heap_bytes);
        if (s.open_fds) fds.set(*s.open_fds);
        if (s.threads) threads.set(*s.threads);
        if (s.start_time_seconds) start.set(*s.start_time_seconds);
        if (s.cpu_seconds) {
            std::lock_guard lock(*cpu_mutex);
            if (*s.cpu_seconds > cpu.value()) cpu.inc(*s.cpu_seconds - cpu.value());
        }
    });
}

}  // namespace calserve::metrics
