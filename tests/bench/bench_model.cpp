// Reference-transformer benchmarks: memory read bandwidth, decode tokens/s on the
// qwen3-0.6b shape (BF16) as a fraction of the memory roofline, batched decode
// (4 and 16 rows: cpu_steps/s against batch 1's gives the step-time ratio),
// prefill tokens/s at 128 to 4,096 tokens (attention grows with the square of the
// length, so the 4,096 / 256 rate ratio measures it), weight loading MB/s with
// io_uring vs pread; the same decode from a Q8_0 GGUF of that checkpoint (int8
// kernel, ~0.53x the bytes per token).
//
// The two arithmetic modes (kernels.hpp, `arithmetic`) side by side, interleaved in
// registration order so that one run's noise falls on both: prefill at 256, 1,024 and
// 4,096 tokens and decode at batch 1, 4, 8 and 16, fp32 then bf16 (`BM_*_modes`, second
// argument 0 = fp32, 1 = bf16); quote their ratios. `BM_attention_v_cache`: one layer's
// attention with BF16 V against the S8 V-cache, decode and a 64-row chunk.
//
// The machine's limits (bench_limits.hpp, BM_machine_limits: the dot-product
// instructions' peaks per core; BM_memory_read_bandwidth) and every decode and prefill
// figure as a fraction of the limit that bounds it: `roofline_*` = weight bytes per
// second / read bandwidth, `peak_*` = operations per second (multiply-add = 2: the
// layers' linear maps, attention, the LM head for rows whose logits are computed) /
// (the instruction's peak per core x 2 cores), by wall time and by CPU time / threads
// (the rate while our threads ran: on a shared machine the wall figure is the lower).
// The Q8_0 int8 kernel's VNNI form against its AVX2 form (same bits): BM_linear_q8,
// BM_decode_q8_forms, BM_prefill_q8_forms.
//
// The 0.6b-shape checkpoint (~1.2 GB) is generated once into
// $CALSERVE_BENCH_MODEL_DIR (default /tmp/calserve-bench/qwen3-0.6b-shape-bf16),
// its Q8_0 GGUF beside it (<dir>.q8_0.gguf).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <vector>

#include "io/file_reader.hpp"
#include "model/weights/gguf_model.hpp"
#include "model/core/bf16.hpp"
#include "model/cpu/attention.hpp"
#include "model/cpu/kernels.hpp"
#include "model/weights/synthetic_model.hpp"
#include "model/cpu/transformer.hpp"
#include "tests/bench/bench_limits.hpp"

namespace {
using namespace calserve;

constexpr int k_threads = 2;

std::filesystem::path bench_model_dir() {
    if (const char* env = std::getenv("CALSERVE_BENCH_MODEL_DIR")) return env;
    return "/tmp/calserve-bench/qwen3-0.6b-shape-bf16";
}

const std::filesystem::path& ensure_model() {
    static const std::filesystem::path dir = [] {
        auto d = bench_model_dir();
        if (!std::filesystem::exists(d / "config.json")) {
            auto r = model::make_synthetic_model("qwen3-0.6b-shape", d, 1, "bf16", {});
            if (!r) throw std::runtime_error(r.error().what());
        }
        return d;
    }();
    return dir;
}

std::unique_ptr<model::transformer> load_bench_model(const std::filesystem::path& path,
                                                     model::arithmetic arith = model::arithmetic::fp32) {
    model::load_options o;
    o.threads = k_threads;
    o.arith = arith;
    auto r = model::transformer::load(path, o);
    if (!r) throw std::runtime_error(r.error().what());
    return std::move(*r);
}

model::transformer& shared_model() {
    static std::unique_ptr<model::transformer> m = load_bench_model(ensure_model());
    return *m;
}

model::transformer& shared_bf16_model() {
    static std::unique_ptr<model::transformer> m = load_bench_model(ensure_model(), model::arithmetic::bf16);
    return *m;
}

model::transformer& model_in_mode(std::int64_t mode) { return mode == 0 ? shared_model() : shared_bf16_model(); }

model::transformer& shared_q8_model() {
    static std::unique_ptr<model::transformer> m = [] {
        const std::filesystem::path file = ensure_model().string() + ".q8_0.gguf";
        if (!std::filesystem::exists(file)) {
            auto r = model::write_gguf_from_hf(ensure_model(), file, "q8_0");
            if (!r) throw std::runtime_error(r.error().what());
        }
        return load_bench_model(file);
    }();
    return *m;
}

// Weights every token multiplies in the layers (dense Qwen3): q, k, v, o, gate, up, down.
std::int64_t linear_params(const model::transformer& m) {
    const auto& c = m.config();
    const std::int64_t qd = c.num_attention_heads * c.head_dim, kvd = c.num_key_value_heads * c.head_dim;
    return c.num_hidden_layers * (c.hidden_size * (qd + 2 * kvd) + qd * c.hidden_size + 3 * c.hidden_size * c.intermediate_size);
}

// Operations (a multiply-add = 2) of one token at position pos: the layers' linear
// maps, attention over pos + 1 keys (scores and the weighted sum), and the LM head
// when the token's logits are computed.
double token_ops(const model::transformer& m, std::int64_t pos, bool lm_head) {
    const auto& c = m.config();
    const double attn = 4.0 * static_cast<double>(c.num_hidden_layers * c.num_attention_heads * c.head_dim * (pos + 1));
    const double head = lm_head ? 2.0 * static_cast<double>(c.vocab_size * c.hidden_size) : 0.0;
    return 2.0 * static_cast<double>(linear_params(m)) + attn + head;
}

using bench::process_cpu_seconds;

const bench::read_bandwidth& measured_read_bandwidth() { return bench::measured_read_bandwidth(k_threads); }

void BM_memory_read_bandwidth(benchmark::State& state) {
    for (auto _ : state) benchmark::DoNotOptimize(measured_read_bandwidth());
    state.counters["wall_GB/s"] = measured_read_bandwidth().wall / 1e9;
    state.counters["cpu_GB/s"] = measured_read_bandwidth().cpu / 1e9;
}
BENCHMARK(BM_memory_read_bandwidth)->Iterations(1)->Unit(benchmark::kMillisecond);

// The dot-product peak (operations per second, all k_threads cores) that bounds m's
// linear layers: int8 products for Q8_0, BF16 pair products in the bf16 mode, FP32
// FMAs otherwise; the AVX2 forms' where the AVX-512 instruction is missing.
double peak_for(const model::transformer& m) {
    const auto& p = bench::measured_peaks();
    double per_core = 0;
    const auto& c = m.config();
    const double weights = static_cast<double>(linear_params(m) + c.vocab_size * c.hidden_size * (c.tie_word_embeddings ? 1 : 2));
    if (static_cast<double>(m.shape().weight_bytes) / weights < 1.5)
        per_core = p.dpbusd > 0 ? p.dpbusd : p.maddubs_avx2;  // Q8_0: ~1.06 bytes per weight
    else if (m.arithmetic_mode() == model::arithmetic::bf16)
        per_core = p.dpbf16 > 0 ? p.dpbf16 : p.fma_avx512 > 0 ? p.fma_avx512 : p.fma_avx2;
    else
        per_core = p.fma_avx512 > 0 ? p.fma_avx512 : p.fma_avx2;
    return per_core * k_threads;
}

// Weight bytes each decoded token must stream: every matrix once, the LM head
// in full (tied: the embedding table), the embedding lookup only one row.
double bytes_per_token(const model::transformer& m) {
    const auto& c = m.config();
    const double table = static_cast<double>(c.vocab_size * c.hidden_size) * 2.0;  // BF16 (untied only)
    return static_cast<double>(m.shape().weight_bytes) - (c.tie_word_embeddings ? 0.0 : table);
}

void decode_bench(benchmark::State& state, model::transformer& m) {
    const auto batch = static_cast<std::size_t>(state.range(0));
    std::vector<float> logits(static_cast<std::size_t>(m.shape().vocab_size) * batch);
    std::vector<model::seq_id> seqs;
    std::vector<model::token_id> toks;
    for (std::size_t b = 0; b < batch; ++b) {
        std::vector<model::token_id> prompt{9707, 11, 1879, static_cast<model::token_id>(b)};
        if (!m.prefill(100 + b, prompt, std::span(logits.data(), static_cast<std::size_t>(m.shape().vocab_size))))
            state.SkipWithError("prefill failed");
        seqs.push_back(100 + b);
        toks.push_back(static_cast<model::token_id>(1000 + b));
    }
    const bench::read_bandwidth& bw = measured_read_bandwidth();
    const double step_ops = token_ops(m, 4, true) * static_cast<double>(batch);
    const double c0 = process_cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        if (!m.decode_batch(seqs, toks, logits)) state.SkipWithError("decode failed");
        benchmark::DoNotOptimize(logits.data());
    }
    std::chrono::duration<double> wall = std::chrono::steady_clock::now() - t0;
    const double cpu = (process_cpu_seconds() - c0) / k_threads;
    m.free_all();
    const auto steps = static_cast<double>(state.iterations());
    state.counters["tokens"] = benchmark::Counter(steps * static_cast<double>(batch), benchmark::Counter::kIsRate);
    state.counters["weight_MB/step"] = bytes_per_token(m) / 1e6;
    // Fraction of the roofline (bandwidth / bytes per step), by wall and by CPU time.
    state.counters["roofline_wall"] = steps / wall.count() / (bw.wall / bytes_per_token(m));
    state.counters["roofline_cpu"] = steps / cpu / (bw.cpu / bytes_per_token(m));
    state.counters["cpu_steps/s"] = steps / cpu;
    // Achieved operations per second against the dot-product peak of both cores.
    state.counters["GOP/s_cpu"] = steps * step_ops / cpu / 1e9;
    state.counters["peak_wall"] = steps * step_ops / wall.count() / peak_for(m);
    state.counters["peak_cpu"] = steps * step_ops / cpu / peak_for(m);
}
void BM_decode_qwen3_0_6b_bf16(benchmark::State& state) { decode_bench(state, shared_model()); }
BENCHMARK(BM_decode_qwen3_0_6b_bf16)->Arg(1)->Arg(4)->Arg(16)->Unit(benchmark::kMillisecond)->MinTime(3.0)->UseRealTime();

// The same with the BF16 dot kernels held to their AVX2 form (same bits; on a CPU
// without AVX-512 both benchmarks time the AVX2 form).
void BM_decode_qwen3_0_6b_bf16_avx2(benchmark::State& state) {
    model::allow_bf16_dot_avx512(false);
    decode_bench(state, shared_model());
    model::allow_bf16_dot_avx512(true);
}
BENCHMARK(BM_decode_qwen3_0_6b_bf16_avx2)->Arg(1)->Arg(4)->Unit(benchmark::kMillisecond)->MinTime(3.0)->UseRealTime();

// The same checkpoint as a Q8_0 GGUF (tied embeddings: the table is read once, in Q8_0).
void BM_decode_qwen3_0_6b_q8_0(benchmark::State& state) { decode_bench(state, shared_q8_model()); }
BENCHMARK(BM_decode_qwen3_0_6b_q8_0)->Arg(1)->Arg(4)->Unit(benchmark::kMillisecond)->MinTime(3.0)->UseRealTime();

// Q8_0 decode with the int8 kernel's VNNI form (arg 1 = 1) against its AVX2 form (0), alternating.
void BM_decode_q8_forms(benchmark::State& state) {
    model::allow_q8_dot_vnni(state.range(1) == 1);
    state.SetLabel(model::q8_dot_vnni() ? "vnni" : "avx2");
    decode_bench(state, shared_q8_model());
    model::allow_q8_dot_vnni(true);
}
BENCHMARK(BM_decode_q8_forms)
    ->Args({1, 0})->Args({1, 1})->Args({8, 0})->Args({8, 1})->Args({16, 0})->Args({16, 1})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();

// A verify step of speculative decoding (decode_runs): range(0) rows of range(1) positions
// each (1 = a plain decode step), one row-exact pass; the rows are truncated back after
// each step, as rejected drafts are. Side by side, step time at 5 positions over 1 is the
// cost of verifying 4 drafts (docs/performance.md "Speculative decoding").
void BM_verify_qwen3_0_6b_bf16(benchmark::State& state) {
    auto& m = shared_model();
    const auto rows = static_cast<std::size_t>(state.range(0));
    const auto positions = state.range(1);
    const auto vocab = static_cast<std::size_t>(m.shape().vocab_size);
    std::vector<float> logits(vocab * rows * static_cast<std::size_t>(positions));
    std::vector<model::seq_id> seqs;
    std::vector<std::int64_t> counts(rows, positions);
    std::vector<model::token_id> toks;
    for (std::size_t b = 0; b < rows; ++b) {
        std::vector<model::token_id> prompt{9707, 11, 1879, static_cast<model::token_id>(b)};
        if (!m.prefill(200 + b, prompt, std::span(logits.data(), vocab))) state.SkipWithError("prefill failed");
        seqs.push_back(200 + b);
        for (std::int64_t i = 0; i < positions; ++i) toks.push_back(static_cast<model::token_id>(1000 + b + std::size_t(i)));
    }
    for (auto _ : state) {
        if (!m.decode_runs(seqs, counts, toks, logits)) state.SkipWithError("verify failed");
        benchmark::DoNotOptimize(logits.data());
        for (auto s : seqs) (void)m.truncate(s, 4);
    }
    m.free_all();
    state.counters["positions/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * double(rows) * double(positions),
                                                       benchmark::Counter::kIsRate);
}
BENCHMARK(BM_verify_qwen3_0_6b_bf16)
    ->Args({1, 1})->Args({1, 3})->Args({1, 5})->Args({4, 1})->Args({4, 5})
    ->Unit(benchmark::kMillisecond)->MinTime(3.0)->UseRealTime();

void prefill_bench(benchmark::State& state, model::transformer& m) {
    std::vector<model::token_id> prompt(static_cast<std::size_t>(state.range(0)));
    for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<model::token_id>((i * 7919) % 151936);
    std::vector<float> logits(static_cast<std::size_t>(m.shape().vocab_size));
    double ops = 0;  // the LM head (one row) left out
    for (std::int64_t p = 0; p < state.range(0); ++p) ops += token_ops(m, p, false);
    const double c0 = process_cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        if (!m.prefill(1, prompt, logits)) state.SkipWithError("prefill failed");
        m.free_sequence(1);
    }
    std::chrono::duration<double> wall = std::chrono::steady_clock::now() - t0;
    const double cpu = (process_cpu_seconds() - c0) / k_threads;
    const auto runs = static_cast<double>(state.iterations());
    state.counters["tokens"] =
        benchmark::Counter(static_cast<double>(state.iterations() * state.range(0)), benchmark::Counter::kIsRate);
    state.counters["GOP/s_cpu"] = runs * ops / cpu / 1e9;
    state.counters["peak_wall"] = runs * ops / wall.count() / peak_for(m);
    state.counters["peak_cpu"] = runs * ops / cpu / peak_for(m);
}
void BM_prefill_qwen3_0_6b_bf16(benchmark::State& state) { prefill_bench(state, shared_model()); }
BENCHMARK(BM_prefill_qwen3_0_6b_bf16)->Arg(128)->Unit(benchmark::kMillisecond)->UseRealTime();
// One prefill each (a 4,096-token prefill takes a minute or more here): compare rates from one run.
BENCHMARK(BM_prefill_qwen3_0_6b_bf16)->Arg(256)->Arg(1024)->Arg(4096)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// fp32 (arg 1 = 0) against bf16 (1) arithmetic, alternating, one prefill each.
void BM_prefill_modes(benchmark::State& state) {
    prefill_bench(state, model_in_mode(state.range(1)));
    state.SetLabel(model::to_string(model_in_mode(state.range(1)).arithmetic_mode()));
}
// Explicit pairs: ArgsProduct would run every fp32 case before the first bf16 one.
BENCHMARK(BM_prefill_modes)
    ->Args({256, 0})->Args({256, 1})->Args({1024, 0})->Args({1024, 1})->Args({4096, 0})->Args({4096, 1})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Q8_0 prefill, the VNNI form (arg 1 = 1) against the AVX2 form (0), one prefill each, alternating.
void BM_prefill_q8_forms(benchmark::State& state) {
    model::allow_q8_dot_vnni(state.range(1) == 1);
    state.SetLabel(model::q8_dot_vnni() ? "vnni" : "avx2");
    prefill_bench(state, shared_q8_model());
    model::allow_q8_dot_vnni(true);
}
BENCHMARK(BM_prefill_q8_forms)
    ->Args({256, 0})->Args({256, 1})->Args({1024, 0})->Args({1024, 1})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_decode_modes(benchmark::State& state) {
    decode_bench(state, model_in_mode(state.range(1)));
    state.SetLabel(model::to_string(model_in_mode(state.range(1)).arithmetic_mode()));
}
BENCHMARK(BM_decode_modes)
    ->Args({1, 0})->Args({1, 1})->Args({4, 0})->Args({4, 1})->Args({8, 0})->Args({8, 1})->Args({16, 0})->Args({16, 1})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(3.0)
    ->UseRealTime();

// One thread's linear layer on a 3,072 x 1,024 BF16 matrix (the 0.6b shape's
// gate_proj), t tokens, fp32 (arg 1 = 0) vs bf16 (1): GFLOP/s by thread CPU time,
// the kernel alone (no attention, no threads to wait for).
void BM_linear_modes(benchmark::State& state) {
    const std::int64_t t = state.range(0), rows = 3072, cols = 1024;
    const auto arith = state.range(1) == 0 ? model::arithmetic::fp32 : model::arithmetic::bf16;
    std::vector<std::uint16_t> w(static_cast<std::size_t>(rows * cols));
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = model::f32_to_bf16(static_cast<float>(i % 97) / 97.0f - 0.5f);
    const model::tensor_view view{model::dtype::bf16, rows, cols, cols, reinterpret_cast<const std::byte*>(w.data())};
    model::simd_vector<float> x(static_cast<std::size_t>(t * cols), 0.25f), y(static_cast<std::size_t>(t * rows));
    model::thread_pool pool(1);
    for (auto _ : state) {
        model::linear(pool, view, x.data(), t, cols, y.data(), rows, model::linear_mode::row_exact, arith);
        benchmark::DoNotOptimize(y.data());
    }
    state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(rows * cols * t) * 1e-9 *
                                                   static_cast<double>(state.iterations()),
                                                   benchmark::Counter::kIsRate);
    state.SetLabel(model::to_string(arith));
}
BENCHMARK(BM_linear_modes)
    ->Args({1, 0})->Args({1, 1})->Args({8, 0})->Args({8, 1})->Args({128, 0})->Args({128, 1})
    ->Unit(benchmark::kMillisecond);

// The same matrix as Q8_0 (int8 kernel), t tokens, the VNNI form (arg 1 = 1) against the
// AVX2 form (0), alternating; one thread: GOP/s by thread CPU time (same bits, kernels.hpp).
void BM_linear_q8(benchmark::State& state) {
    const std::int64_t t = state.range(0), rows = 3072, cols = 1024;
    std::vector<float> wf(static_cast<std::size_t>(rows * cols));
    for (std::size_t i = 0; i < wf.size(); ++i) wf[i] = static_cast<float>(i % 97) / 97.0f - 0.5f;
    std::vector<std::byte> wq(static_cast<std::size_t>(rows * cols / 32 * 34));
    model::quantize_q8_0(wf.data(), rows * cols, wq.data());
    const model::tensor_view view{model::dtype::q8_0, rows, cols, cols, wq.data()};
    model::simd_vector<float> x(static_cast<std::size_t>(t * cols), 0.25f), y(static_cast<std::size_t>(t * rows));
    model::thread_pool pool(1);
    model::allow_q8_dot_vnni(state.range(1) == 1);
    for (auto _ : state) {
        model::linear(pool, view, x.data(), t, cols, y.data(), rows, model::linear_mode::row_exact);
        benchmark::DoNotOptimize(y.data());
    }
    state.SetLabel(model::q8_dot_vnni() ? "vnni" : "avx2");
    model::allow_q8_dot_vnni(true);
    state.counters["GOP/s"] = benchmark::Counter(2.0 * static_cast<double>(rows * cols * t) * 1e-9 *
                                                 static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_linear_q8)
    ->Args({1, 0})->Args({1, 1})->Args({8, 0})->Args({8, 1})->Args({128, 0})->Args({128, 1})
    ->Unit(benchmark::kMillisecond);

// Page-cache-warm read of every shard with the chosen backend.
// One layer's attention on one thread, the 0.6b shape (8 KV heads x 128, group 2), over a
// context of range(0) positions, BF16 V (arg 1 = 0) against S8 V (1), alternating: decode
// (one row at the last position) and a 64-row prefill chunk at the end of the context.
// Key+value bytes read per row: S8 V streams 3/4 of BF16's plus the scales.
void BM_attention_v_cache(benchmark::State& state) {
    const std::int64_t ctx = state.range(0), kvh = 8, g = 2, hd = 128, rows = state.range(2);
    const auto v = state.range(1) == 0 ? model::v_cache_dtype::bf16 : model::v_cache_dtype::s8;
    model::kv_cache kv;
    kv.reserve(1, kvh, hd, ctx, v);
    std::vector<float> k(static_cast<std::size_t>(hd)), val(k.size());
    for (std::int64_t p = 0; p < ctx; ++p)
        for (std::int64_t h = 0; h < kvh; ++h) {
            for (std::int64_t d = 0; d < hd; ++d)
                k[d] = static_cast<float>((p * 31 + h * 7 + d) % 29) / 29.0f - 0.5f, val[d] = static_cast<float>((p + d) % 13) / 13.0f;
            kv.store(0, p, h, k.data(), val.data());
        }
    const std::int64_t qd = kvh * g * hd;
    std::vector<float> q(static_cast<std::size_t>(rows * qd), 0.1f), out(q.size());
    std::vector<model::attention_row> r;
    for (std::int64_t i = 0; i < rows; ++i) r.push_back({&kv, ctx - rows + i});
    model::attention_args a;
    a.kv_begin = 0, a.kv_end = kvh, a.group = g, a.q = q.data(), a.ldq = qd, a.out = out.data(), a.ldo = qd;
    model::thread_pool pool(1);
    for (auto _ : state) {
        model::attend_causal(pool, a, r);
        benchmark::DoNotOptimize(out.data());
    }
    state.counters["KV MB"] = static_cast<double>(kv.bytes()) / 1e6;
    state.SetLabel(std::string(model::to_string(v)) + (rows == 1 ? " decode" : " prefill chunk"));
}
BENCHMARK(BM_attention_v_cache)
    ->Args({4096, 0, 1})->Args({4096, 1, 1})->Args({16384, 0, 1})->Args({16384, 1, 1})
    ->Args({4096, 0, 64})->Args({4096, 1, 64})
    ->Unit(benchmark::kMicrosecond);

void BM_load_weights(benchmark::State& state) {
    const auto backend = state.range(0) == 0 ? io::read_backend::io_uring : io::read_backend::pread;
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(ensure_model()))
        if (e.path().extension() == ".safetensors") files.push_back(e.path());
    std::uint64_t total = 0;
    io::read_options o;
    o.backend = backend;
    for (auto _ : state) {
        for (const auto& f : files) {
            auto size = io::file_size(f);
            auto buf = std::make_unique_for_overwrite<std::byte[]>(*size);
            if (!io::read_range(f, 0, std::span(buf.get(), *size), o)) state.SkipWithError("read failed");
            total += *size;
        }
    }
    state.counters["MB"] = benchmark::Counter(static_cast<double>(total) / 1e6, benchmark::Counter::kIsRate);
    state.SetLabel(std::string(io::to_string(backend)));
}
BENCHMARK(BM_load_weights)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
