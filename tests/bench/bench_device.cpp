// Device-layer micro-benchmarks: host overhead of one simulated job (fill the slot,
// infer, complete, read the BF16 logits) in virtual time with a trivial model, so
// the figure is the device layer's own cost per decode step; the fault-registry
// check on the hot path, unarmed and armed; and the modelled ping/pong pipeline:
// virtual time per step with one vs two jobs in flight (counters, not wall time).
#include <benchmark/benchmark.h>

#include <memory>
#include <map>
#include <numeric>
#include <vector>

#include "device/runner/host_session.hpp"
#include "device/sim/sim_device.hpp"

namespace {
using namespace calserve;
using namespace calserve::device;

constexpr std::int64_t k_vocab = 151936;  // a Qwen3 logits row

// Constant logits: the benchmark measures the device layer, not a model.
class flat_lm final : public model::causal_lm {
public:
    flat_lm() { shape_.vocab_size = k_vocab; }
    const model::model_shape& shape() const override { return shape_; }
    void_result prefill(model::seq_id s, std::span<const model::token_id> t, std::span<float> l) override {
        len_[s] += static_cast<std::int64_t>(t.size());
        std::fill(l.begin(), l.end(), 0.5f);
        return {};
    }
    void_result decode(model::seq_id s, model::token_id, std::span<float> l) override {
        ++len_[s];
        std::fill(l.begin(), l.end(), 0.25f);
        return {};
    }
    std::int64_t sequence_length(model::seq_id s) const override { return len_.contains(s) ? len_.at(s) : 0; }
    void free_sequence(model::seq_id s) override { len_.erase(s); }
    void free_all() override { len_.clear(); }

private:
    model::model_shape shape_;
    std::map<model::seq_id, std::int64_t> len_;
};

tensor_desc tensor(std::string name, std::vector<std::int64_t> shape, dtype t, std::uint64_t ping, std::uint64_t pong) {
    tensor_desc d{std::move(name), std::move(shape), t, 0, ping, pong, 0};
    d.bytes = static_cast<std::uint64_t>(d.elements()) * dtype_size(t);
    return d;
}

package_spec bench_spec(std::int64_t context) {
    package_spec p;
    p.name = "bench";
    p.vocab_size = k_vocab;
    p.context = context;
    for (auto [name, kind, tokens, base] : {std::tuple{"b_prefill", submodel_kind::prefill, context, 0xc0000000ULL},
                                            std::tuple{"b_decode", submodel_kind::decode, std::int64_t{1}, 0xd0000000ULL}}) {
        submodel_desc sm;
        sm.name = name;
        sm.kind = kind;
        sm.max_tokens = tokens;
        sm.inputs = {tensor("token", {1, tokens}, dtype::int32, base, base + 0x100000),
                     tensor("position", {1, tokens}, dtype::int32, base + 0x200000, base + 0x300000)};
        sm.outputs = {tensor("logits", {1, 1, k_vocab}, dtype::bf16, base + 0x400000, base + 0x500000)};
        sm.csrs = {{"cur_seq_len", 0x1104}, {"past_kv_cur_seq_len", 0x1144}};
        p.submodels.push_back(sm);
    }
    p.kv = kv_layout{2, 2, 8, context, 4, 2, 2, 256};
    p.chips = {chip_memory{1 << 20, 0}};
    return p;
}

struct bench_device {
    sim::manual_scheduler clock;
    std::shared_ptr<sim::sim_device> dev;
    explicit bench_device(double step_ms, double d2h_ms, std::int64_t context = 4096) {
        sim::sim_options o;
        o.scheduler = &clock;
        o.latency.step_ms = step_ms;
        o.latency.d2h_ms = d2h_ms;
        o.make_model = [](const package_spec&) -> result<std::unique_ptr<model::causal_lm>> {
            return std::unique_ptr<model::causal_lm>(std::make_unique<flat_lm>());
        };
        dev = sim::sim_device::create(std::move(o));
        void_result r = dev->load(bench_spec(context));
        if (r) r = dev->configure().ok() ? void_result{} : make_error(status::configure_failed, "configure");
        if (r) r = dev->warmup();
        if (!r) error = r.error().what();
    }
    std::string error;
};

// Host cost of one decode step through the device interface (virtual time, no pacing).
void BM_sim_decode_step(benchmark::State& state) {
    bench_device b(0, 0);
    runner::host_session s(*b.dev, std::chrono::seconds(1));
    (void)b.dev->kv_allocate(1, 0);
    const model::token_id t = 7;
    if (auto p = s.prefill(1, std::span(&t, 1)); !b.error.empty() || !p) {
        state.SkipWithError(b.error.empty() ? p.error().what().c_str() : b.error.c_str());
        return;
    }
    const std::int64_t context = b.dev->package().context;
    for (auto _ : state) {
        if (b.dev->kv_length(1) >= context - 1) {  // start the sequence over before it fills
            state.PauseTiming();
            (void)b.dev->kv_free(1);
            (void)b.dev->kv_allocate(1, 0);
            (void)s.prefill(1, std::span(&t, 1));
            state.ResumeTiming();
        }
        auto j = s.submit(submodel_kind::decode, slot::ping, 1, std::span(&t, 1));
        if (!j) {
            state.SkipWithError(j.error().what().c_str());
            break;
        }
        auto r = b.dev->wait(*j, std::chrono::seconds(1));
        auto out = b.dev->output("b_decode", slot::ping, "logits");
        benchmark::DoNotOptimize(out->data());
        benchmark::DoNotOptimize(r.ok());
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_sim_decode_step);

void BM_fault_check_unarmed(benchmark::State& state) {
    fault_registry r;
    const fault_site site{1, "b_decode", 1, {}};
    for (auto _ : state) benchmark::DoNotOptimize(r.check(fault_point::ccu_exception, site));
}
BENCHMARK(BM_fault_check_unarmed);

void BM_fault_check_armed_other_match(benchmark::State& state) {
    fault_registry r;
    fault_spec s;
    s.point = fault_point::ccu_exception;
    s.mode = arm_mode::always;
    s.match.sequence = 99;
    (void)r.arm(s);
    const fault_site site{1, "b_decode", 1, {}};
    for (auto _ : state) benchmark::DoNotOptimize(r.check(fault_point::ccu_exception, site));
}
BENCHMARK(BM_fault_check_armed_other_match);

// Modelled pipeline: two sequences, step_ms = d2h_ms = 10, host time 0. Reports the
// virtual milliseconds per job with one and with two jobs in flight and their ratio.
void BM_modelled_pingpong(benchmark::State& state) {
    const int inflight = static_cast<int>(state.range(0));
    constexpr int k_jobs = 200;
    double ms_per_job = 0;
    for (auto _ : state) {
        bench_device b(10, 10);
        runner::host_session s(*b.dev, std::chrono::seconds(10));
        for (seq_id q : {1, 2}) (void)b.dev->kv_allocate(q, 0);
        const model::token_id t = 3;
        const auto t0 = b.clock.now();
        std::vector<std::pair<job_id, slot>> flight;
        for (int i = 0; i < k_jobs; ++i) {
            const slot sl = i % 2 == 0 ? slot::ping : slot::pong;
            if (static_cast<int>(flight.size()) == inflight) {
                (void)b.dev->wait(flight.front().first, std::chrono::seconds(10));
                flight.erase(flight.begin());
            }
            auto j = s.submit(submodel_kind::prefill, sl, static_cast<seq_id>(1 + i % 2), std::span(&t, 1));
            if (!j) {
                state.SkipWithError(j.error().what().c_str());
                return;
            }
            flight.emplace_back(*j, sl);
        }
        for (auto& f : flight) (void)b.dev->wait(f.first, std::chrono::seconds(10));
        ms_per_job = std::chrono::duration<double, std::milli>(b.clock.now() - t0).count() / k_jobs;
    }
    state.counters["virtual_ms_per_job"] = ms_per_job;
}
BENCHMARK(BM_modelled_pingpong)->Arg(1)->Arg(2)->Iterations(3);

}  // namespace
