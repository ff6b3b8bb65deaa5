#include "actors/request_actor.hpp"

#include <algorithm>
#include <spdlog/spdlog.h>

#include "actors/batch_tick_actor.hpp"
#include "metrics/metrics.hpp"

namespace calserve::actors {

std::string_view to_string(request_state s) {
    switch (s) {
        case request_state::received: return "received";
        case request_state::queued: return "queued";
        case request_state::prefilling: return "prefilling";
        case request_state::decoding: return "decoding";
        case request_state::finished: return "finished";
        case request_state::cancelled: return "cancelled";
        case request_state::timed_out: return "timed_out";
        case request_state::failed: return "failed";
        case request_state::rejected: return "rejected";
    }
    return "?";
}

bool is_terminal(request_state s) {
    return s == request_state::finished || s == request_state::cancelled || s == request_state::timed_out ||
           s == request_state::failed || s == request_state::rejected;
}

const char* to_string(finish_reason r) {
    switch (r) {
        case finish_reason::stop: return "stop";
        case finish_reason::length: return "length";
        case finish_reason::cancelled: return "cancelled";
        case finish_reason::timeout: return "timeout";
        case finish_reason::error: return "error";
    }
    return "error";
}

request_actor::request_actor(runtime& rt, request_setup setup, metrics::calserve_metrics* metrics)
    : actor(rt, "request:" + setup.seq->request_id), setup_(std::move(setup)), metrics_(metrics),
      life_(k_request_table, request_state::received, "request:" + setup_.seq->request_id),
      decoder_(setup_.tokenizer), matcher_(setup_.stop) {}

void request_actor::on_message(request_message& msg) {
    if (is_terminal(life_.state())) return;  // late tokens, cancels and deadlines after the end
    std::visit([this](auto& m) { on(m); }, msg);
}

double request_actor::since_arrival(std::chrono::nanoseconds t) const {
    return std::chrono::duration<double>(t - setup_.seq->arrived).count();
}

void request_actor::on(rq_start&) {
    life_.transition_to(request_state::queued);
    if (metrics_) metrics_->prompt_tokens_total.inc(double(setup_.seq->prompt_len));
    deadline_ = start_timer(setup_.timeout, [this] { (void)enqueue(rq_deadline{}, id()); });
    (void)setup_.tick.tell(bt_admit{setup_.seq, address<request_actor>(shared_from_this())}, id());
}

void request_actor::on(rq_scheduled&) {
    if (!life_.transition_to(request_state::prefilling)) return;
    t_scheduled_ = rt().now();
    if (metrics_) {
        metrics_->request_queue_time.observe(since_arrival(t_scheduled_));
        metrics_->phase_seconds(metrics::phase::queue).observe(since_arrival(t_scheduled_));
    }
}

void request_actor::on(rq_token& m) {
    auto now = rt().now();
    device_s_ += m.device_s;  // counted even for a stop id: the device ran the job
    device_wall_s_ += m.device_wall_s;
    ++device_steps_;
    if (life_.is(request_state::prefilling)) {
        life_.transition_to(request_state::decoding);
        t_first_token_ = now;
        device_first_s_ = device_s_;
        cached_tokens_ = std::max<std::int64_t>(0, m.cached_tokens);
        prompt_scores_ = std::move(m.prompt_scores);
    }
    // TTFT, inter-token and end-to-end latency and requests_total are recorded at the
    // network edge (net/), where the client-visible times are; not here, to count once.
    ++completion_tokens_;
    if (metrics_) metrics_->generation_tokens_total.inc();
    bool stop_id = std::find(setup_.stop_ids.begin(), setup_.stop_ids.end(), m.token) != setup_.stop_ids.end();
    if (stop_id) {
        finish(request_state::finished, finish_reason::stop, std::nullopt);
        return;
    }
    auto flushed = matcher_.push(decoder_.push(m.token));
    // The Sampler set `ended` before this token was sent here (message order), and
    // nobody else writes it: a complete grammar ends the request as EOS would.
    const bool grammar_done = setup_.seq->constraint && setup_.seq->constraint->ended;
    const bool more = !flushed.stopped && !grammar_done && completion_tokens_ < setup_.seq->max_tokens;
    // The answer goes first: the next batch waits for it, the client's stream does not.
    if (more) (void)setup_.tick.tell(bt_continue{setup_.seq->seq}, id());
    setup_.sink->on_token(generated_token{m.token, std::move(flushed.released), m.logprob, std::move(m.top)});
    if (flushed.stopped || grammar_done) finish(request_state::finished, finish_reason::stop, std::nullopt);
    else if (!more) finish(request_state::finished, finish_reason::length, std::nullopt);
}

void request_actor::on(rq_failed& m) {
    bool before_start = life_.is(request_state::queued) || life_.is(request_state::received);
    auto cls = fault_class_of(m.error.code);
    bool rejected = before_start && (cls == fault_class::capacity || m.error.code == status::context_overflow);
    // A client did not cause this one (a shed at the door is a rejection, a deadline or a
    // disconnect never comes here): one line that names it, for the operator to find.
    if (!rejected)
        spdlog::warn("request {} failed: sequence {}, after {}: {} ({})", setup_.seq->request_id, setup_.seq->seq,
                     m.operation.empty() ? std::string("no device operation") : m.operation, to_string(m.error.code),
                     m.error.what());
    finish(rejected ? request_state::rejected : request_state::failed, finish_reason::error, m.error);
}

void request_actor::on(rq_cancel&) { finish(request_state::cancelled, finish_reason::cancelled, std::nullopt); }

void request_actor::on(rq_deadline&) {
    finish(request_state::timed_out, finish_reason::timeout, make_error(status::deadline_exceeded, "request deadline passed"));
}

void request_actor::finish(request_state final_state, finish_reason reason, std::optional<error_info> failure) {
    if (!life_.transition_to(final_state)) return;
    deadline_.cancel();
    generation_result result;
    result.reason = reason;
    result.tokens = {setup_.seq->prompt_len, completion_tokens_, cached_tokens_};
    if (final_state == request_state::finished && !matcher_.stopped()) {
        auto tail = matcher_.push(decoder_.flush());
        result.tail_text = tail.released + (tail.stopped ? std::string() : matcher_.flush());
    }
    result.failure = std::move(failure);
    result.prompt_scores = std::move(prompt_scores_);
    auto now = rt().now();
    result.e2e_s = since_arrival(now);
    result.queue_s = t_scheduled_.count() ? since_arrival(t_scheduled_) : result.e2e_s;
    result.ttft_s = t_first_token_.count() ? since_arrival(t_first_token_) : 0;
    result.device_s = device_s_;
    result.device_first_s = device_first_s_;
    result.device_wall_s = device_wall_s_;
    result.device_steps = device_steps_;
    setup_.sink->on_finish(result);
    (void)setup_.tick.tell(bt_finish{setup_.seq->seq}, id());
    if (metrics_ && final_state == request_state::failed && result.failure)
        metrics_->requests_failed_total.labels({std::string(to_string(fault_class_of(result.failure->code)))}).inc();
    if (setup_.on_terminal) setup_.on_terminal(setup_.seq->request_id, final_state);
    stop();
    rt().release(this);
}

}  // namespace calserve::actors
