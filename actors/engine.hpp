#pragma once
//! The serving engine as the network layer sees it: the actors' vocabulary
//! (requests, tokens, sinks, results) and the abstract `engine`. `net/` turns
//! HTTP/WebSocket requests into `generation_request`s and streams what a
//! `generation_sink` receives. The implementations are in engine/: the
//! `serving_engine` spawns one package's actors (Request, BatchTick, KvManager,
//! ChipSession, DeviceActor, Sampler), the `traced_engine` records one for
//! replay, and the `model_router` routes each model to the `serving_engine` of
//! its serving generation (`route`).
//!
//! Contract:
//!  - `submit` validates against the model (prompt ids in the vocabulary, usable
//!    context), the request's fields and admission (device dead, draining, in
//!    flight) and fails *immediately* with a status (invalid_argument and
//!    context_overflow -> 400, queue_full/overloaded -> 429, not_ready and
//!    device_dead -> 503) without device work.
//!  - After a successful submit the sink gets zero or more `on_token` and then
//!    exactly one `on_finish`, in order, from runtime threads. Sinks must not block.
//!  - `cancel(id)` is idempotent; the request finishes with finish_reason::cancelled
//!    and its KV is released no later than the end of the jobs holding it (two
//!    when its token was chained: the later one's token is never streamed).
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/result.hpp"
#include "model/chat/message.hpp"
#include "model/grammar/grammar.hpp"
#include "model/sampling/params.hpp"

namespace calserve::actors {

using token_id = std::int32_t;

// What the output must follow (docs/api.md, "Structured outputs and tools"). The
// network layer compiles `grammar` on its tokenize pool (engine::compile_grammar,
// a bounded cache); a request replayed from a trace carries only kind and text and
// is compiled at submit. An inactive constraint costs the serving path nothing.
struct output_constraint {
    model::grammar::grammar_kind kind = model::grammar::grammar_kind::ebnf;
    std::string grammar;                                     // empty (and kind ebnf) = no grammar
    std::shared_ptr<const model::grammar::compiled> compiled;
    // The prompt leaves the think block open: tokens up to </think> are reasoning
    // and the grammar starts after it.
    bool thinking = false;
    std::int64_t max_reasoning_tokens = -1;                  // >= 0: </think> is forced after that many
    bool has_grammar() const {
        return !grammar.empty() || kind != model::grammar::grammar_kind::ebnf;
    }
    bool active() const { return has_grammar() || (thinking && max_reasoning_tokens >= 0); }
};

struct generation_request {
    std::string id;                           // server-assigned, unique ("cmpl-...")
    std::vector<token_id> prompt;             // already tokenized (chat template applied)
    model::sampling_params sampling;
    std::int64_t max_tokens = 16;
    std::vector<std::string> stop;            // stop strings (matched across token boundaries)
    std::vector<token_id> stop_token_ids;
    bool ignore_eos = false;
    std::chrono::milliseconds timeout{0};     // 0 = runtime.request_timeout_ms
    output_constraint constraint;
    // Scopes the prefix cache: requests share cached KV only when their salts are equal.
    std::string cache_salt;
    // Scoring: >= 0 scores every prompt token with that many alternatives (<= 20)
    // (generation_result::prompt_scores); -1: none. A scored prompt is prefilled whole,
    // never from the prefix cache (cached KV comes with no logits).
    std::int32_t score_top_n = -1;
};

struct token_logprob {
    token_id token = 0;
    float logprob = 0;
};

// A prompt token's score (docs/api.md "Scoring"): its logprob given the tokens before
// it and the most likely tokens there, at temperature 1 with no penalty.
struct prompt_score {
    float logprob = 0;
    std::vector<token_logprob> top;
};

struct generated_token {
    token_id token = 0;
    std::string text;                         // text released by this token (may be empty: held for UTF-8 or stop match)
    float logprob = 0;                        // filled when sampling.logprobs
    std::vector<token_logprob> top;           // sampling.top_logprobs entries
};

enum class finish_reason : std::uint8_t { stop, length, cancelled, timeout, error };
const char* to_string(finish_reason r);

struct usage {
    std::int64_t prompt_tokens = 0;
    std::int64_t completion_tokens = 0;
    std::int64_t cached_tokens = 0;           // prompt tokens whose KV came from the prefix cache
};

struct generation_result {
    finish_reason reason = finish_reason::stop;
    usage tokens;
    std::string tail_text;                    // text still held back at finish (flushed, stop string removed)
    std::optional<error_info> failure;        // set when reason == error or timeout
    // score_top_n >= 0: one per prompt token, the first's empty (nothing precedes it);
    // empty when the request ended before its prefill did.
    std::vector<prompt_score> prompt_scores;
    // Server-side phase times for the timing log, seconds.
    double queue_s = 0, ttft_s = 0, e2e_s = 0;
    // Device clock: modelled compute time of the jobs whose logits this request
    // used (jobs lost at a device fault are not counted), their count, and the
    // part spent up to the first token (the prefill job). `device_wall_s` is the
    // same jobs as the host saw them, inputs filled to logits copied out: it adds
    // transfers, waiting behind the other slot and, on the simulator, the CPU
    // time that computes the numbers.
    double device_s = 0, device_first_s = 0, device_wall_s = 0;
    std::int64_t device_steps = 0;
};

class generation_sink {
public:
    virtual ~generation_sink() = default;
    virtual void on_token(const generated_token& token) = 0;
    virtual void on_finish(const generation_result& result) = 0;
};

struct model_card {
    std::string name;                         // model id served at /v1/models
    std::int64_t usable_context = 0;          // min(package, slot, tokenizer)
    std::int64_t vocab_size = 0;
    std::string backend;                      // "sim" or "cpu"
    // A prompt text longer than this cannot fit in usable_context whatever its
    // content (model::tokenizer::max_text_bytes); 0 = no such bound. The network
    // layer refuses such a prompt without tokenizing it.
    std::size_t max_prompt_bytes = 0;
};

struct engine_health {
    bool ready = false;                       // accepting work
    bool healthy = true;                      // alive and making token progress
    std::string device_state;                 // DeviceActor state name
    std::int64_t running = 0;
    std::int64_t waiting = 0;
};

using chat_message = model::chat_message;
using chat_options = model::chat_options;

class engine {
public:
    virtual ~engine() = default;
    virtual void_result submit(generation_request request, std::shared_ptr<generation_sink> sink) = 0;
    virtual void cancel(const std::string& request_id) = 0;
    virtual const model_card& card() const = 0;
    virtual engine_health health() const = 0;

    // Tokenizer access for /tokenize, /detokenize and prompt preparation.
    virtual result<std::vector<token_id>> encode(std::string_view text) const = 0;
    // encode, answering context_overflow as soon as the text needs more than
    // `max_tokens` ids (bounded work for a prompt that cannot fit).
    virtual result<std::vector<token_id>> encode_prompt(std::string_view text, std::int64_t max_tokens) const {
        (void)max_tokens;
        return encode(text);
    }
    virtual result<std::string> decode(const std::vector<token_id>& ids) const = 0;
    virtual result<std::string> apply_chat_template(const std::vector<chat_message>& messages,
                                                    const chat_options& options) const = 0;
    // A grammar for `output_constraint`, through the engine's bounded compile cache
    // (thread-safe: the network layer calls it from its tokenize pool). Errors are
    // invalid_argument naming the schema path or the EBNF line:col.
    virtual result<std::shared_ptr<const model::grammar::compiled>> compile_grammar(model::grammar::grammar_kind kind,
                                                                                   std::string_view text) const {
        (void)kind;
        (void)text;
        return make_error(status::unsupported, "this engine has no grammar engine");
    }

    // Several models (docs/generations.md): the engine that serves `model`, ""
    // meaning the only one. The returned engine stays valid while the caller holds
    // it, even when an alias switches meanwhile: a request finishes on the
    // generation that admitted it. Unknown model: not_found; "" with several
    // served: invalid_argument naming the choices. A single engine serves itself.
    virtual result<std::shared_ptr<engine>> route(std::string_view model) {
        if (!model.empty() && model != card().name)
            return make_error(status::not_found, "model '" + std::string(model) + "' does not exist (served: " +
                                                     card().name + ")");
        return std::shared_ptr<engine>(std::shared_ptr<engine>{}, this);
    }
    // Every model served, as /v1/models lists them.
    virtual std::vector<model_card> models() const { return {card()}; }

    // Graceful stop: refuse new work, let in-flight finish.
    virtual void drain() = 0;
    virtual void resume() = 0;
    virtual std::int64_t in_flight() const = 0;
};

}  // namespace calserve::actors
