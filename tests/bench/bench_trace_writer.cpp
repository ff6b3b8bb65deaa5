// Trace writer benchmarks (io/trace_writer): N lines of 200 bytes (newline
// included) pushed from one thread and flushed to a file in the temp directory
// (open, N pushes, close), in lines/s:
//   BM_trace_writer/<0 io_uring | 1 pwrite>/<N>   one backend
//   BM_trace_memcpy/<N>      the floor: the same bytes memcpy'd line by line into one buffer
//   BM_trace_writer_ratio/<N>  all three in one run, best of 5 wall-clock passes each:
//                            counters io_uring_lps, pwrite_lps, memcpy_lps,
//                            uring_over_pwrite and memcpy_over_uring
// The queue is sized to N, so nothing is dropped (a drop fails the benchmark);
// the previous pass's file is deleted outside the timed region.
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "io/trace_writer.hpp"

namespace {

namespace fs = std::filesystem;
using calserve::io::trace_writer;
using calserve::io::trace_writer_options;
using calserve::io::write_backend;

constexpr std::size_t line_bytes = 200;  // with its newline

const std::string& sample_line() {
    static const std::string line = [] {
        std::string s = R"({"k":"msg","seq":123456,"t":987654321,"from_id":3,"to_id":4,"from":"batch_tick","to":"chip_session","type":"cs_run","pad":")";
        s.resize(line_bytes - 3, 'x');
        return s + "\"}";
    }();
    return line;
}

fs::path bench_file() { return fs::temp_directory_path() / ("calserve-trace-bench-" + std::to_string(::getpid()) + ".jsonl"); }

// One pass: open, push n lines, close. Empty on success, else why it failed.
std::string writer_pass(write_backend backend, std::size_t n) {
    trace_writer_options opts;
    opts.backend = backend;
    opts.capacity = n;
    auto w = trace_writer::open(bench_file().string(), opts);
    if (!w) return w.error().what();
    for (std::size_t i = 0; i < n; ++i) (*w)->push(sample_line());
    if (auto r = (*w)->close(); !r) return r.error().what();
    if ((*w)->dropped() != 0 || (*w)->bytes_written() != n * line_bytes) return "lines dropped or bytes missing";
    return {};
}

void memcpy_pass(std::vector<char>& out, std::size_t n) {
    const std::string& line = sample_line();
    char* at = out.data();
    for (std::size_t i = 0; i < n; ++i) {
        std::memcpy(at, line.data(), line.size());
        at[line.size()] = '\n';
        at += line_bytes;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
}

void BM_trace_writer(benchmark::State& state) {
    const auto backend = state.range(0) == 0 ? write_backend::io_uring : write_backend::pwrite;
    const auto n = static_cast<std::size_t>(state.range(1));
    for (auto _ : state) {
        state.PauseTiming();
        fs::remove(bench_file());  // freeing the last pass's pages is not the writer's cost
        state.ResumeTiming();
        if (auto why = writer_pass(backend, n); !why.empty()) return state.SkipWithError(why.c_str());
    }
    fs::remove(bench_file());
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * line_bytes));
}
BENCHMARK(BM_trace_writer)->Args({0, 1 << 17})->Args({1, 1 << 17})->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_trace_memcpy(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    std::vector<char> out(n * line_bytes);
    for (auto _ : state) memcpy_pass(out, n);
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * line_bytes));
}
BENCHMARK(BM_trace_memcpy)->Arg(1 << 17)->Unit(benchmark::kMillisecond);

// Best lines/s of `passes` runs of `pass`, on the wall clock (the writer thread works too).
template <class F>
double best_lines_per_s(std::size_t n, int passes, F&& pass) {
    double best = 0;
    for (int i = 0; i < passes; ++i) {
        fs::remove(bench_file());
        auto t0 = std::chrono::steady_clock::now();
        if (!pass()) return -1;
        std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
        best = std::max(best, static_cast<double>(n) / dt.count());
    }
    return best;
}

void BM_trace_writer_ratio(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    std::vector<char> out(n * line_bytes);
    for (auto _ : state) {
        std::string why;
        auto with = [&](write_backend b) {
            return best_lines_per_s(n, 5, [&] { return (why = writer_pass(b, n)).empty(); });
        };
        double uring = with(write_backend::io_uring);
        double pwrite = with(write_backend::pwrite);
        double copy = best_lines_per_s(n, 5, [&] { return memcpy_pass(out, n), true; });
        if (uring <= 0 || pwrite <= 0) return state.SkipWithError(why.c_str());
        state.counters["io_uring_lps"] = uring;
        state.counters["pwrite_lps"] = pwrite;
        state.counters["memcpy_lps"] = copy;
        state.counters["uring_over_pwrite"] = uring / pwrite;
        state.counters["memcpy_over_uring"] = copy / uring;
    }
    fs::remove(bench_file());
}
BENCHMARK(BM_trace_writer_ratio)->Arg(1 << 17)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
