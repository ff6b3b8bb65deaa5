// The one main() of calserve_bench_micro: every tests/bench/*.cpp only registers benchmarks.
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
