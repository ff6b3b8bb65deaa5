// The machine's limits (bench_limits.hpp): instruction peak loops and the read
// bandwidth probe, and BM_machine_limits printing them.
#include "tests/bench/bench_limits.hpp"

#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <vector>

#include "model/core/thread_pool.hpp"
#include "model/cpu/kernels.hpp"

namespace calserve::bench {
namespace {

double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

constexpr long k_iters = 4'000'000;  // x 16 instructions per loop
constexpr int k_chains = 16;         // independent accumulators: covers every latency here


// Runs body(acc) k_iters times; returns instructions per CPU second (best of 3).
template <class Body>
double instr_rate(Body body) {
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
        const double c0 = thread_cpu_seconds();
        body();
        const double dt = thread_cpu_seconds() - c0;
        best = std::max(best, static_cast<double>(k_iters) * k_chains / dt);
    }
    return best;
}

#define CALSERVE_PEAK_ISA \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx512vnni,avx2,fma"), noinline))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

CALSERVE_PEAK_ISA void loop_dpbf16() {
    __m512 acc[k_chains];
    for (auto& a : acc) a = _mm512_setzero_ps();
    const __m512i a = _mm512_set1_epi16(0x3f80), b = _mm512_set1_epi16(0x3c00);
    for (long i = 0; i < k_iters; ++i)
        for (auto& c : acc) c = _mm512_dpbf16_ps(c, (__m512bh)a, (__m512bh)b);
    __m512 s = acc[0];
    for (int i = 1; i < k_chains; ++i) s = _mm512_add_ps(s, acc[i]);
    benchmark::DoNotOptimize(s);
}

CALSERVE_PEAK_ISA void loop_dpbusd() {
    __m512i acc[k_chains];
    for (auto& a : acc) a = _mm512_setzero_si512();
    const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
    for (long i = 0; i < k_iters; ++i)
        for (auto& c : acc) c = _mm512_dpbusd_epi32(c, a, b);
    __m512i s = acc[0];
    for (int i = 1; i < k_chains; ++i) s = _mm512_add_epi32(s, acc[i]);
    benchmark::DoNotOptimize(s);
}

CALSERVE_PEAK_ISA void loop_fma512() {
    __m512 acc[k_chains];
    for (auto& a : acc) a = _mm512_setzero_ps();
    const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-7f);
    for (long i = 0; i < k_iters; ++i)
        for (auto& c : acc) c = _mm512_fmadd_ps(c, a, b);
    __m512 s = acc[0];
    for (int i = 1; i < k_chains; ++i) s = _mm512_add_ps(s, acc[i]);
    benchmark::DoNotOptimize(s);
}

#pragma GCC diagnostic pop

#define CALSERVE_AVX2_ISA __attribute__((target("avx2,fma"), noinline))
CALSERVE_AVX2_ISA void loop_fma256() {
    __m256 acc[k_chains];
    for (auto& a : acc) a = _mm256_setzero_ps();
    const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-7f);
    for (long i = 0; i < k_iters; ++i)
        for (auto& c : acc) c = _mm256_fmadd_ps(c, a, b);
    __m256 s = acc[0];
    for (int i = 1; i < k_chains; ++i) s = _mm256_add_ps(s, acc[i]);
    benchmark::DoNotOptimize(s);
}

// The AVX2 int8 form's step: maddubs, madd to int32, add (one "instruction" here = 32 products).
CALSERVE_AVX2_ISA void loop_maddubs() {
    __m256i acc[k_chains];
    for (auto& a : acc) a = _mm256_setzero_si256();
    const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2), one = _mm256_set1_epi16(1);
    for (long i = 0; i < k_iters; ++i)
        for (auto& c : acc) c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), one));
    __m256i s = acc[0];
    for (int i = 1; i < k_chains; ++i) s = _mm256_add_epi32(s, acc[i]);
    benchmark::DoNotOptimize(s);
}

}  // namespace

double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

const peak_rates& measured_peaks() {
    static const peak_rates p = [] {
        peak_rates r;
        __builtin_cpu_init();
        r.fma_avx2 = instr_rate(loop_fma256) * 16;
        r.maddubs_avx2 = instr_rate(loop_maddubs) * 64;
        if (__builtin_cpu_supports("avx512f")) r.fma_avx512 = instr_rate(loop_fma512) * 32;
        if (__builtin_cpu_supports("avx512bf16")) r.dpbf16 = instr_rate(loop_dpbf16) * 64;
        if (__builtin_cpu_supports("avx512vnni")) r.dpbusd = instr_rate(loop_dpbusd) * 128;
        return r;
    }();
    return p;
}

const read_bandwidth& measured_read_bandwidth(int threads) {
    static const read_bandwidth bw = [threads] {
        const std::int64_t n = (768ll << 20) / 4;
        std::vector<float> buf(static_cast<std::size_t>(n), 1.0f);
        model::thread_pool pool(threads);
        read_bandwidth best;
        volatile float sink = 0;
        for (int rep = 0; rep < 5; ++rep) {
            const double c0 = process_cpu_seconds();
            auto t0 = std::chrono::steady_clock::now();
            std::vector<float> part(64, 0.0f);
            pool.parallel_for(n, 1 << 16, n, [&](std::int64_t b, std::int64_t e) {
                part[static_cast<std::size_t>(b / (n / 32 + 1))] += model::sum_f32(buf.data() + b, e - b);
            });
            std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
            const double cpu = (process_cpu_seconds() - c0) / threads;
            sink = sink + part[0];
            best.wall = std::max(best.wall, static_cast<double>(n) * 4.0 / dt.count());
            best.cpu = std::max(best.cpu, static_cast<double>(n) * 4.0 / cpu);
        }
        return best;
    }();
    return bw;
}

namespace {

// The limits, once: GB/s, and GFLOP/s (GOP/s for int8) per core.
void BM_machine_limits(benchmark::State& state) {
    for (auto _ : state) benchmark::DoNotOptimize(measured_peaks());
    const peak_rates& p = measured_peaks();
    state.counters["fma_avx2_GFLOP/s/core"] = p.fma_avx2 / 1e9;
    state.counters["fma_avx512_GFLOP/s/core"] = p.fma_avx512 / 1e9;
    state.counters["vdpbf16ps_GFLOP/s/core"] = p.dpbf16 / 1e9;
    state.counters["vpdpbusd_GOP/s/core"] = p.dpbusd / 1e9;
    state.counters["maddubs_avx2_GOP/s/core"] = p.maddubs_avx2 / 1e9;
}
BENCHMARK(BM_machine_limits)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace calserve::bench
