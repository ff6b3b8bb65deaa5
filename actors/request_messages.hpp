#pragma once
//! Messages a Request actor accepts.
#include <variant>
#include <vector>

#include "actors/engine.hpp"
#include "config/result.hpp"

namespace calserve::actors {

struct rq_start {};                   // engine: the request is queued (starts the deadline)
struct rq_scheduled {};               // BatchTick: its first prefill job was formed
struct rq_token {                     // ChipSession: one sampled token
    token_id token = 0;
    float logprob = 0;
    std::vector<token_logprob> top;
    double device_s = 0;              // device compute time of the job that produced it
    double device_wall_s = 0;         // that job from inputs filled to logits copied out (host clock)
    std::int64_t cached_tokens = -1;  // a prefill's token: prompt tokens taken from the prefix cache
    std::vector<prompt_score> prompt_scores;  // a scoring prefill's token: every prompt token's score
};
struct rq_failed {                    // anyone: the request cannot go on
    error_info error;
    // What the runtime last asked for this request when it failed ("decode job on slot
    // pong, row 2 of 4", "kv_reserve"): named in the request's warning line.
    std::string operation;
};
struct rq_cancel {};                  // client cancel or disconnect
struct rq_deadline {};                // its own deadline timer

using request_message = std::variant<rq_start, rq_scheduled, rq_token, rq_failed, rq_cancel, rq_deadline>;

}  // namespace calserve::actors
