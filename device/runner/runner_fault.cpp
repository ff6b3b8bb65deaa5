// Runner, fault mode (see runner.hpp): each scenario provokes one failure and must
// see the expected structured status within its bound; the device is then brought
// back to a ready, empty state before the next one.
#include <chrono>
#include <functional>
#include <optional>
#include <thread>

#include "device/runner/host_session.hpp"
#include "device/runner/runner.hpp"

namespace calserve::device::runner {

namespace json = boost::json;
using clock_type = std::chrono::steady_clock;

void_result recover(device& dev) {
    constexpr int k_attempts = 3;
    error_info last{status::reset_failed, "no attempt"};
    for (int i = 0; i < k_attempts; ++i) {
        auto r = dev.reset();
        if (r) r = dev.warmup();
        if (r) return {};
        last = r.error();
    }
    return last;
}

namespace {
constexpr seq_id k_seq = 7;

struct fault_ctx {
    device& dev;
    fault_registry& faults;
    model::causal_lm& ref;
    host_session session;
    const runner_options& o;
};

// What a scenario observed: the first error, or ok.
using outcome = void_result;

struct scenario {
    std::string name;
    status expected;
    bool waits;  // bounded by the Wait limit (else by a short call bound)
    std::function<outcome(fault_ctx&)> run;
};

fault_spec arm_once(fault_point p, double delay_ms = 0) {
    fault_spec s;
    s.point = p;
    s.delay_ms = delay_ms;
    return s;
}

std::vector<model::token_id> prompt(fault_ctx& c, std::size_t n) { return make_prompt(n, c.o.seed + n, c.dev.package().vocab_size); }

outcome start_seq(fault_ctx& c) { return c.dev.kv_allocate(k_seq, 0); }

// Fills the prefill slot by hand so individual steps can be skipped or corrupted.
outcome hand_filled(fault_ctx& c, bool write_token, std::uint32_t cur_delta) {
    if (auto r = start_seq(c); !r) return r;
    const auto& sm = c.session.prefill_submodel();
    const auto tokens = prompt(c, 4);
    std::vector<std::int32_t> pos{0, 1, 2, 3};
    if (auto r = c.dev.kv_apply(k_seq, 4, c.o.wait_limit); !r) return r;
    if (auto r = c.dev.slice(sm.name, slot::ping, 4); !r) return r;
    if (write_token) {
        if (auto r = c.dev.write_input(sm.name, slot::ping, "token", std::as_bytes(std::span(tokens))); !r) return r;
    }
    if (auto r = c.dev.write_input(sm.name, slot::ping, "position", std::as_bytes(std::span(pos))); !r) return r;
    if (auto r = c.dev.write_csr(sm.name, slot::ping, k_csr_cur_seq_len, 4 + cur_delta); !r) return r;
    if (auto r = c.dev.write_csr(sm.name, slot::ping, k_csr_past_kv_len, 0); !r) return r;
    auto j = c.dev.infer(sm.name, slot::ping, k_seq);
    if (!j) return j.error();
    auto w = c.dev.wait(*j, c.o.wait_limit);
    return w ? outcome{} : outcome{w.error()};
}

outcome one_prefill(fault_ctx& c, std::size_t n = 4) {
    if (auto r = start_seq(c); !r) return r;
    auto out = c.session.prefill(k_seq, prompt(c, n));
    return out ? outcome{} : outcome{out.error()};
}

// Submit one job and wait with the (short) fault Wait bound.
outcome prefill_bounded_wait(fault_ctx& c) {
    if (auto r = start_seq(c); !r) return r;
    const auto tokens = prompt(c, 4);
    auto j = c.session.submit(submodel_kind::prefill, slot::ping, k_seq, tokens);
    if (!j) return j.error();
    auto w = c.dev.wait(*j, c.o.fault_wait_limit);
    return w ? outcome{} : outcome{w.error()};
}

outcome queue_full(fault_ctx& c) {
    const seq_id a = 21, b = 22;
    if (auto r = c.dev.kv_allocate(a, 0); !r) return r;
    if (auto r = c.dev.kv_allocate(b, 0); !r) return r;
    auto ja = c.session.submit(submodel_kind::prefill, slot::ping, a, prompt(c, 8));
    auto jb = c.session.submit(submodel_kind::prefill, slot::pong, b, prompt(c, 5));
    if (!ja) return ja.error();
    if (!jb) return jb.error();
    auto third = c.dev.infer(c.session.prefill_submodel().name, slot::ping, a);  // both slots busy
    (void)c.dev.wait(*ja, c.o.wait_limit);
    (void)c.dev.wait(*jb, c.o.wait_limit);
    return third ? outcome{} : outcome{third.error()};
}

outcome kv_full(fault_ctx& c) {
    const auto& pkg = c.dev.package();
    const std::int64_t rounds = pkg.kv.slots + 2;
    for (std::int64_t i = 0; i < rounds; ++i) {
        if (auto r = c.dev.kv_allocate(100 + static_cast<seq_id>(i), pkg.context); !r) return r;
    }
    return {};
}

outcome reset_then_warmup(fault_ctx& c) {
    if (auto r = c.dev.reset(); !r) return r;
    if (auto r = c.dev.warmup(); !r) return r;
    // A golden check after recovery: the numbers must equal the reference's.
    const auto tokens = prompt(c, 12);
    if (auto r = start_seq(c); !r) return r;
    auto d = c.session.prefill(k_seq, tokens);
    if (!d) return d.error();
    std::vector<float> ref(static_cast<std::size_t>(c.dev.package().vocab_size));
    constexpr model::seq_id k_ref = 9999;
    auto r = c.ref.prefill(k_ref, tokens, ref);
    c.ref.free_sequence(k_ref);
    if (!r) return r;
    round_to_bf16(ref);
    const auto cmp = compare_logits(d->logits, ref);
    if (!cmp.top1_match || cmp.cosine < c.o.min_cosine)
        return make_error(status::internal, "logits after warm-up differ from the reference");
    return {};
}

std::vector<scenario> scenarios() {
    auto armed = [](fault_point p, std::function<outcome(fault_ctx&)> body, double delay = 0) {
        return [p, body, delay](fault_ctx& c) -> outcome {
            if (auto r = c.faults.arm(arm_once(p, delay)); !r) return r.error();
            return body(c);
        };
    };
    return {
        {"missing_tensor", status::missing_tensor, false, [](fault_ctx& c) { return hand_filled(c, false, 0); }},
        {"wrong_csr", status::bad_csr, false, [](fault_ctx& c) { return hand_filled(c, true, 1); }},
        {"slice_out_of_range", status::slice_out_of_range, false,
         [](fault_ctx& c) {
             const auto& sm = c.session.prefill_submodel();
             return c.dev.slice(sm.name, slot::ping, sm.max_tokens + 1);
         }},
        {"kv_full", status::kv_full, false, kv_full},
        // The first job runs 500 ms longer, so the third infer meets both slots busy on any machine.
        {"submit_busy_queue_full", status::submit_busy, true, armed(fault_point::slow_infer, queue_full, 500)},
        {"submit_busy", status::submit_busy, false, armed(fault_point::submit_busy, [](fault_ctx& c) { return one_prefill(c); })},
        {"wait_timeout", status::wait_timeout, true, armed(fault_point::wait_timeout, prefill_bounded_wait)},
        {"ccu_exception", status::ccu_exception, true, armed(fault_point::ccu_exception, prefill_bounded_wait)},
        {"reset_then_warmup", status::ok, true, reset_then_warmup},
        {"submit_error", status::submit_error, false, armed(fault_point::submit_error, [](fault_ctx& c) { return one_prefill(c); })},
        {"h2d_error", status::h2d_error, false, armed(fault_point::h2d_error, [](fault_ctx& c) { return one_prefill(c); })},
        {"d2h_error", status::d2h_error, true, armed(fault_point::d2h_error, prefill_bounded_wait)},
        {"device_lost", status::device_lost, true, armed(fault_point::device_lost, prefill_bounded_wait)},
        {"logits_nan", status::logits_nan, true, armed(fault_point::logits_nan, [](fault_ctx& c) { return one_prefill(c); })},
        {"kv_alloc_fail", status::kv_full, false, armed(fault_point::kv_alloc_fail, start_seq)},
        {"kv_apply_stall", status::kv_full, true,
         armed(fault_point::kv_apply_stall,
               [](fault_ctx& c) -> outcome {
                   if (auto r = start_seq(c); !r) return r;
                   return c.dev.kv_apply(k_seq, 8, c.o.fault_wait_limit);
               })},
        {"slow_infer", status::ok, true, armed(fault_point::slow_infer, [](fault_ctx& c) { return one_prefill(c); }, 20)},
        {"reset_fail", status::reset_failed, false, armed(fault_point::reset_fail, [](fault_ctx& c) { return c.dev.reset(); })},
    };
}

json::object run_scenario(fault_ctx& c, const scenario& s, bool& pass) {
    const auto t0 = clock_type::now();
    const outcome got = s.run(c);
    const double elapsed_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
    const double call_bound_ms = 1000;  // a call that should answer at once
    const double bound_ms = s.waits ? std::chrono::duration<double, std::milli>(c.o.fault_wait_limit).count() +
                                          std::chrono::duration<double, std::milli>(c.o.wait_limit).count()
                                    : call_bound_ms;
    c.faults.clear();
    const status state_status = got.code();
    json::object r{{"scenario", s.name},
                   {"expected", std::string(to_string(s.expected))},
                   {"got", std::string(to_string(state_status))},
                   {"class", std::string(to_string(fault_class_of(state_status)))},
                   {"message", got ? std::string() : got.error().message},
                   {"elapsed_ms", elapsed_ms},
                   {"bound_ms", bound_ms},
                   {"device_state", std::string(to_string(c.dev.status().state))}};
    // Back to a ready, empty device for the next scenario.
    void_result healed = c.dev.status().state == device_state::ready ? void_result{} : recover(c.dev);
    if (healed) healed = c.dev.status().jobs_in_flight == 0 ? c.dev.kv_clear() : recover(c.dev);
    const bool ok = state_status == s.expected && elapsed_ms <= bound_ms && healed.ok();
    r["recovered"] = healed.ok();
    r["pass"] = ok;
    pass = pass && ok;
    return r;
}
}  // namespace

runner_report run_fault(device& dev, fault_registry& faults, model::causal_lm& reference, const runner_options& o) {
    fault_ctx c{dev, faults, reference, host_session(dev, o.wait_limit), o};
    bool pass = true;
    json::array results;
    for (const auto& s : scenarios()) results.push_back(run_scenario(c, s, pass));
    runner_report report;
    report.json["mode"] = "fault";
    report.json["package"] = dev.package().name;
    report.json["fault_wait_limit_ms"] = std::chrono::duration<double, std::milli>(o.fault_wait_limit).count();
    report.json["scenarios"] = std::move(results);
    report.json["kv_blocks_used_at_end"] = dev.kv().blocks_used;
    report.json["device_state_at_end"] = std::string(to_string(dev.status().state));
    pass = pass && dev.kv().blocks_used == 0 && dev.status().state == device_state::ready;
    report.pass = pass;
    report.json["verdict"] = pass ? "pass" : "fail";
    return report;
}

}  // namespace calserve::device::runner
