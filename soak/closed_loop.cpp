#include "soak/closed_loop.hpp"

#include <charconv>
#include <random>

#include "soak/simulation.hpp"

namespace calserve::soak {

namespace {

io::trace_submit request_at(const closed_loop_options& o, int index, std::int64_t vocab, std::int64_t t_ns,
                            std::mt19937_64& rng) {
    io::trace_submit s;
    s.t_ns = t_ns;
    s.id = std::to_string(index);
    s.id.insert(s.id.begin(), 'r');
    // Distinct prompts (no prefix shared past a cache block), token ids below the vocabulary.
    std::uniform_int_distribution<std::int32_t> tok(16, std::int32_t(std::max<std::int64_t>(17, vocab - 1)));
    s.prompt.resize(std::size_t(o.prompt_tokens));
    for (auto& t : s.prompt) t = tok(rng);
    s.max_tokens = o.output_tokens;
    s.temperature = 0;
    s.ignore_eos = true;
    return s;
}

engine_summary engine_of(const engine_figures& f, const sim_report& report, double window_s) {
    engine_summary e;
    if (window_s > 0) e.device_busy_fraction = f.device_busy_s / window_s;
    if (f.kv_blocks_capacity > 0) e.kv_peak_fraction = double(f.kv_blocks_peak) / double(f.kv_blocks_capacity);
    e.preemptions = report.preemptions;
    if (f.prefix_cache_queries > 0) e.prefix_cache_hit_rate = f.prefix_cache_hits / f.prefix_cache_queries;
    return e;
}

}  // namespace

result<closed_loop_outcome> run_closed_loop(const closed_loop_options& o) {
    sim_setup setup;
    setup.package_dir = o.package_dir;
    setup.overrides = o.overrides;
    setup.check_reference = false;
    auto made = simulation::create(setup, {});
    if (!made) return made.error();
    auto& sim = **made;
    std::mt19937_64 rng(o.seed);
    const int total = std::max(0, o.warmup) + std::max(0, o.requests);
    const auto limit_ns = sim.now_ns() + std::int64_t(o.limit_s * 1e9);
    int sent = 0;
    auto send = [&] { sim.apply(request_at(o, sent++, sim.vocab_size(), sim.now_ns(), rng)); };
    while (sent < std::min(total, std::max(1, o.concurrency))) send();
    // Timer by timer: each finish frees a place, filled at the instant it freed.
    while (sent < total && sim.now_ns() < limit_ns) {
        const auto finished = sim.outcomes().size();
        const auto due = sim.next_due_ns();
        if (!due) break;
        sim.advance_to(*due);
        sim.collect_finished();
        for (auto n = sim.outcomes().size(); n > finished && sent < total; --n) send();
    }
    sim.finish(std::max(1.0, double(limit_ns - sim.now_ns()) / 1e9));
    closed_loop_outcome out;
    const auto all = predicted_times(sim.outcomes());
    for (const auto& r : all) {
        // Ids are r<index>: the first `warmup` sent are not measured.
        int index = 0;
        std::from_chars(r.id.data() + 1, r.id.data() + r.id.size(), index);
        if (index >= o.warmup) out.rows.push_back(r);
    }
    out.summary = summarize(out.rows, {});
    // The device's busy time counts the warm-up too: over the whole run's window.
    out.engine = engine_of(sim.figures(), sim.report(), summarize(all, {}).window_s);
    out.violations = sim.report().violations;
    return out;
}

}  // namespace calserve::soak
