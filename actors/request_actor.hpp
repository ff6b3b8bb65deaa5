#pragma once
//! Request: one per generation. Turns sampled tokens into the client's stream.
//!
//!   received --> queued --> prefilling --> decoding --> finished
//!      |           |          |      |                     ^
//!      v           |          |      +---------------------+  its first token ended it
//!   rejected <-----+          |
//!                  queued, prefilling, decoding --> cancelled | timed_out | failed
//!
//! Owns: the stream decoder (never emits partial UTF-8), the stop-string
//! matcher (stop strings across token boundaries), stop ids / EOS, max_tokens,
//! usage counts and the deadline timer. Every request reaches exactly one
//! terminal state; on it the sink gets exactly one `on_finish`, the BatchTick a
//! `bt_finish` (which releases KV once no job holds the sequence), and the
//! engine its registry callback. Messages after the terminal state are ignored.
#include <functional>
#include <memory>

#include "actors/runtime/actor.hpp"
#include "actors/runtime/lifecycle.hpp"
#include "actors/request_messages.hpp"
#include "actors/sequence.hpp"
#include "model/chat/stop_matcher.hpp"
#include "model/tokenizer/stream_decoder.hpp"

namespace calserve::metrics {
struct calserve_metrics;
}

namespace calserve::actors {

class batch_tick_actor;

enum class request_state : std::uint8_t {
    received, queued, prefilling, decoding, finished, cancelled, timed_out, failed, rejected
};
std::string_view to_string(request_state s);
bool is_terminal(request_state s);

inline constexpr std::array<transition<request_state>, 16> k_request_table{{
    {request_state::received, request_state::queued},
    {request_state::received, request_state::rejected},
    {request_state::queued, request_state::prefilling},
    {request_state::queued, request_state::cancelled},
    {request_state::queued, request_state::timed_out},
    {request_state::queued, request_state::rejected},
    {request_state::queued, request_state::failed},
    {request_state::prefilling, request_state::decoding},
    {request_state::prefilling, request_state::finished},
    {request_state::prefilling, request_state::cancelled},
    {request_state::prefilling, request_state::timed_out},
    {request_state::prefilling, request_state::failed},
    {request_state::decoding, request_state::finished},
    {request_state::decoding, request_state::cancelled},
    {request_state::decoding, request_state::timed_out},
    {request_state::decoding, request_state::failed},
}};

struct request_setup {
    sequence_ptr seq;
    std::shared_ptr<generation_sink> sink;
    std::shared_ptr<const model::tokenizer> tokenizer;
    std::vector<std::string> stop;
    std::vector<token_id> stop_ids;    // request stop ids, plus EOS unless ignore_eos
    std::chrono::nanoseconds timeout{0};
    address<batch_tick_actor> tick;
    // Called once, on the terminal state (engine registry and counters).
    std::function<void(const std::string& request_id, request_state final_state)> on_terminal;
};

class request_actor : public actor<request_actor, request_message> {
public:
    request_actor(runtime& rt, request_setup setup, metrics::calserve_metrics* metrics);
    void on_message(request_message& msg);
    request_state state() const { return life_.state(); }

private:
    void on(rq_start&);
    void on(rq_scheduled&);
    void on(rq_token& m);
    void on(rq_failed& m);
    void on(rq_cancel&);
    void on(rq_deadline&);
    void finish(request_state final_state, finish_reason reason, std::optional<error_info> failure);
    double since_arrival(std::chrono::nanoseconds t) const;

    request_setup setup_;
    metrics::calserve_metrics* metrics_;
    lifecycle<request_state, k_request_table.size()> life_;
    model::stream_decoder decoder_;
    model::stop_matcher matcher_;
    timer_handle deadline_;
    std::int64_t completion_tokens_ = 0;
    std::int64_t cached_tokens_ = 0;  // prompt tokens its first prefill took from the prefix cache
    std::vector<prompt_score> prompt_scores_;  // a scored prompt: from its first prefill's token
    std::chrono::nanoseconds t_scheduled_{0}, t_first_token_{0};
    // Device clock, summed over the jobs that produced this request's tokens.
    double device_s_ = 0, device_first_s_ = 0, device_wall_s_ = 0;
    std::int64_t device_steps_ = 0;
};

}  // namespace calserve::actors
