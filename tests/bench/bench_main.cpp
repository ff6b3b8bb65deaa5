// The one main() of calserve_bench_micro and calserve_bench_model: every tests/bench/*.cpp only registers benchmarks.
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
