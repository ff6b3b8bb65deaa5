#pragma once
// This machine's limits for the model benchmarks (issue 39): streaming read bandwidth
// of all cores, and the peak rate of each dot-product instruction the kernels use, per
// core, by thread CPU time (so other processes sharing the cores do not lower it).
// A serving figure is quoted as a fraction of the limit that bounds it: decode at
// batch 1 as weight bytes per second / bandwidth, prefill and batched decode as
// achieved FLOP/s (or int8 ops/s) / (peak per core x threads).
#include <string>

namespace calserve::bench {

struct peak_rates {
    // Operations per second per core (a multiply-add counts 2), 0 when the CPU lacks it.
    double fma_avx2 = 0;      // vfmadd231ps ymm: FP32 FMA, 8 lanes
    double fma_avx512 = 0;    // vfmadd231ps zmm: FP32 FMA, 16 lanes (the fp32 mode's kernels)
    double dpbf16 = 0;        // vdpbf16ps zmm: 32 BF16 products into 16 FP32 lanes (the bf16 mode)
    double dpbusd = 0;        // vpdpbusd zmm: 64 int8 products into 16 int32 lanes (Q8_0 on VNNI)
    double maddubs_avx2 = 0;  // vpmaddubsw + vpmaddwd ymm: 32 int8 products (Q8_0 without VNNI)
};

// Measured once per process (a few hundred ms of one thread), best of several runs.
const peak_rates& measured_peaks();

// Bytes per second of `threads` threads each summing its share of a 768 MB buffer,
// best of 5: by wall time and by CPU time / threads (the rate while they ran).
struct read_bandwidth {
    double wall = 0, cpu = 0;
};
const read_bandwidth& measured_read_bandwidth(int threads);

double process_cpu_seconds();

}  // namespace calserve::bench
