// Runner, golden mode (see runner.hpp): device vs reference transformer, teacher-
// forced with the reference's greedy token so every step compares the same history.
#include <algorithm>
#include <set>

#include "device/runner/host_session.hpp"
#include "device/runner/runner.hpp"

namespace calserve::device::runner {

namespace json = boost::json;

namespace {
constexpr seq_id k_golden_seq = 1;        // reused for every prefill length (free then reuse)
constexpr model::seq_id k_ref_seq = 9001;  // the reference model's own ids

// Worst-case metrics over a run of steps.
struct tally {
    double max_abs = 0, max_rel = 0, min_cosine = 1;
    int min_top5 = 5, steps = 0, greedy_mismatches = 0;
    int divergence = -1;  // first step whose argmax differs, -1 if none

    void add(const logits_compare& c) {
        max_abs = std::max(max_abs, c.max_abs);
        max_rel = std::max(max_rel, c.max_rel);
        min_cosine = std::min(min_cosine, c.cosine);
        min_top5 = std::min(min_top5, c.top5_overlap);
        if (!c.top1_match) {
            ++greedy_mismatches;
            if (divergence < 0) divergence = steps;
        }
        ++steps;
    }
    bool ok(double min_cos) const { return greedy_mismatches == 0 && min_cosine >= min_cos; }
    json::object to_json() const {
        return {{"steps", steps},          {"logits_max_abs", max_abs},     {"logits_max_rel", max_rel},
                {"cosine_min", min_cosine}, {"top5_overlap_min", min_top5}, {"greedy_identical", greedy_mismatches == 0},
                {"divergence_step", divergence}};
    }
};

json::object error_json(const error_info& e) {
    return {{"status", std::string(to_string(e.code))}, {"class", std::string(to_string(fault_class_of(e.code)))},
            {"message", e.message}};
}

struct golden_ctx {
    device& dev;
    model::causal_lm& ref;
    host_session session;
    const runner_options& o;
    std::int64_t vocab;
    std::vector<float> ref_logits;
};

// Prefill `prompt` on both sides; returns the device logits or the failing status.
result<std::vector<float>> prefill_both(golden_ctx& g, seq_id seq, model::seq_id ref_seq,
                                        const std::vector<model::token_id>& prompt, tally& t) {
    if (auto r = g.dev.kv_allocate(seq, 0); !r) return r.error();
    auto d = g.session.prefill(seq, prompt);
    if (!d) return d.error();
    if (auto r = g.ref.prefill(ref_seq, prompt, g.ref_logits); !r) return r.error();
    round_to_bf16(g.ref_logits);
    t.add(compare_logits(d->logits, g.ref_logits));
    return std::move(d->logits);
}

json::object golden_case(golden_ctx& g, std::int64_t length, bool& pass) {
    json::object c{{"prefill", length}};
    const auto prompt = make_prompt(static_cast<std::size_t>(length), g.o.seed * 1000003 + length, g.vocab);
    tally t;
    auto dev_logits = prefill_both(g, k_golden_seq, k_ref_seq, prompt, t);
    if (!dev_logits) {
        pass = false;
        c["error"] = error_json(dev_logits.error());
        (void)g.dev.kv_free(k_golden_seq);
        g.ref.free_sequence(k_ref_seq);
        return c;
    }
    c["prefill_compare"] = t.to_json();
    const std::int64_t context = g.dev.package().context;
    const std::int64_t longest = *std::max_element(g.o.decode_lengths.begin(), g.o.decode_lengths.end());
    const std::int64_t steps = std::min(longest, context - length);
    const std::set<std::int64_t> marks(g.o.decode_lengths.begin(), g.o.decode_lengths.end());
    json::array checkpoints;
    for (std::int64_t step = 1; step <= steps; ++step) {
        const model::token_id next = argmax(g.ref_logits);
        auto d = g.session.decode(k_golden_seq, next);
        if (!d) {
            c["error"] = error_json(d.error());
            pass = false;
            break;
        }
        if (auto r = g.ref.decode(k_ref_seq, next, g.ref_logits); !r) {
            c["error"] = error_json(r.error());
            pass = false;
            break;
        }
        round_to_bf16(g.ref_logits);
        t.add(compare_logits(d->logits, g.ref_logits));
        if (marks.contains(step) || step == steps) {
            auto cp = t.to_json();
            cp["decode"] = step;
            cp["capped"] = !marks.contains(step);
            cp["kv_length"] = d->job.kv_length;
            cp["kv_length_expected"] = length + step;
            const bool ok = t.ok(g.o.min_cosine) && d->job.kv_length == length + step &&
                            g.dev.kv_length(k_golden_seq) == length + step;
            cp["pass"] = ok;
            pass = pass && ok;
            checkpoints.push_back(std::move(cp));
        }
    }
    pass = pass && t.ok(g.o.min_cosine);
    c["decode_checkpoints"] = std::move(checkpoints);
    if (auto r = g.dev.kv_free(k_golden_seq); !r) {
        c["free_error"] = error_json(r.error());
        pass = false;
    }
    g.ref.free_sequence(k_ref_seq);
    return c;
}

// A freed id reused for a new prompt must behave like a fresh sequence.
json::object reuse_case(golden_ctx& g, bool& pass) {
    tally t;
    const auto first = make_prompt(23, g.o.seed + 11, g.vocab);
    const auto second = make_prompt(9, g.o.seed + 12, g.vocab);
    json::object c{{"sequence", k_golden_seq}};
    auto a = prefill_both(g, k_golden_seq, k_ref_seq, first, t);
    g.ref.free_sequence(k_ref_seq);
    auto freed = g.dev.kv_free(k_golden_seq);
    const auto blocks_after_free = g.dev.kv().blocks_used;
    tally fresh;
    auto b = a && freed ? prefill_both(g, k_golden_seq, k_ref_seq, second, fresh) : a;
    const bool ok = a.ok() && freed.ok() && b.ok() && blocks_after_free == 0 && fresh.ok(g.o.min_cosine) &&
                    g.dev.kv_length(k_golden_seq) == static_cast<std::int64_t>(second.size());
    c["kv_blocks_after_free"] = blocks_after_free;
    c["reused_compare"] = fresh.to_json();
    c["pass"] = ok;
    pass = pass && ok;
    (void)g.dev.kv_free(k_golden_seq);
    g.ref.free_sequence(k_ref_seq);
    return c;
}

// Two sequences alternate on ping and pong with both jobs in flight.
json::object interleave_case(golden_ctx& g, bool& pass) {
    constexpr int k_steps = 32;
    const seq_id ids[2] = {101, 102};
    const model::seq_id ref_ids[2] = {9101, 9102};
    const slot slots[2] = {slot::ping, slot::pong};
    std::vector<model::token_id> prompts[2] = {make_prompt(17, g.o.seed + 21, g.vocab),
                                               make_prompt(33, g.o.seed + 22, g.vocab)};
    std::vector<float> ref_logits[2];
    tally t[2];
    json::object c{{"sequences", json::array{ids[0], ids[1]}}, {"decode_steps", k_steps}};
    auto fail = [&](const error_info& e) {
        c["error"] = error_json(e);
        pass = false;
        for (int i = 0; i < 2; ++i) {
            (void)g.dev.kv_free(ids[i]);
            g.ref.free_sequence(ref_ids[i]);
        }
        return c;
    };
    job_id jobs[2] = {};
    for (int i = 0; i < 2; ++i) {
        ref_logits[i].resize(static_cast<std::size_t>(g.vocab));
        if (auto r = g.dev.kv_allocate(ids[i], 0); !r) return fail(r.error());
        if (auto r = g.ref.prefill(ref_ids[i], prompts[i], ref_logits[i]); !r) return fail(r.error());
        round_to_bf16(ref_logits[i]);
        auto j = g.session.submit(submodel_kind::prefill, slots[i], ids[i], prompts[i]);
        if (!j) return fail(j.error());
        jobs[i] = *j;
    }
    submodel_kind kind = submodel_kind::prefill;
    for (int step = 0; step <= k_steps; ++step) {
        for (int i = 0; i < 2; ++i) {
            auto d = g.session.collect(jobs[i], kind, slots[i]);
            if (!d) return fail(d.error());
            t[i].add(compare_logits(d->logits, ref_logits[i]));
            if (step == k_steps) continue;
            const model::token_id next = argmax(ref_logits[i]);
            if (auto r = g.ref.decode(ref_ids[i], next, ref_logits[i]); !r) return fail(r.error());
            round_to_bf16(ref_logits[i]);
            auto j = g.session.submit(submodel_kind::decode, slots[i], ids[i], std::span(&next, 1));
            if (!j) return fail(j.error());
            jobs[i] = *j;
        }
        kind = submodel_kind::decode;
    }
    const bool ok = t[0].ok(g.o.min_cosine) && t[1].ok(g.o.min_cosine);
    c["compare"] = json::array{t[0].to_json(), t[1].to_json()};
    c["pass"] = ok;
    pass = pass && ok;
    for (int i = 0; i < 2; ++i) {
        (void)g.dev.kv_free(ids[i]);
        g.ref.free_sequence(ref_ids[i]);
    }
    return c;
}
}  // namespace

runner_report run_golden(device& dev, model::causal_lm& reference, const runner_options& o) {
    golden_ctx g{dev, reference, host_session(dev, o.wait_limit), o, dev.package().vocab_size, {}};
    g.ref_logits.resize(static_cast<std::size_t>(g.vocab));
    bool pass = true;
    const std::int64_t context = dev.package().context;
    std::vector<std::int64_t> lengths;
    for (std::int64_t l : o.prefill_lengths) {
        const std::int64_t n = l < 0 ? context - 1 : l;
        if (n >= 1 && n < context && std::find(lengths.begin(), lengths.end(), n) == lengths.end()) lengths.push_back(n);
    }
    json::array cases;
    for (std::int64_t n : lengths) cases.push_back(golden_case(g, n, pass));
    runner_report report;
    report.json["mode"] = "golden";
    report.json["package"] = dev.package().name;
    report.json["context"] = context;
    report.json["min_cosine"] = o.min_cosine;
    report.json["cases"] = std::move(cases);
    report.json["free_then_reuse"] = reuse_case(g, pass);
    report.json["interleaved"] = interleave_case(g, pass);
    report.json["kv_blocks_used_at_end"] = dev.kv().blocks_used;
    pass = pass && dev.kv().blocks_used == 0;
    report.pass = pass;
    report.json["verdict"] = pass ? "pass" : "fail";
    return report;
}

}  // namespace calserve::device::runner
