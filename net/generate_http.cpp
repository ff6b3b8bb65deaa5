// POST /v1/completions and /v1/chat/completions: admission, submit, and the
// response as SSE (stream) or one JSON object (aggregate). While either runs, the
// connection's read side is watched: a client that goes away cancels its request.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json.hpp>

#include "config/json_text.hpp"
#include "net/openai_format.hpp"
#include "net/responses_api.hpp"
#include "net/request_path.hpp"

namespace calserve::net {
using namespace boost::asio::experimental::awaitable_operators;
using asio::use_awaitable;
using actors::finish_reason;

void token_clock::on_token(metrics::calserve_metrics& m, steady_clock::time_point at) {
    if (!last) {
        ttft_s = seconds_between(received, at);
        m.time_to_first_token.observe(ttft_s);
    } else {
        m.inter_token_latency.observe(seconds_between(*last, at));
    }
    last = at;
}

void count_outcome(metrics::calserve_metrics& m, finish_reason r) {
    using metrics::outcome;
    switch (r) {
        case finish_reason::stop: m.requests(outcome::stop).inc(); return;
        case finish_reason::length: m.requests(outcome::length).inc(); return;
        case finish_reason::cancelled: m.requests(outcome::cancelled).inc(); return;
        case finish_reason::timeout: m.requests(outcome::timeout).inc(); return;
        case finish_reason::error: m.requests(outcome::error).inc(); return;
    }
}

api_error finish_error(const actors::generation_result& r) {
    if (r.reason == finish_reason::timeout) {
        return api_error{status::deadline_exceeded, {}, r.failure ? r.failure->what() : "request deadline passed"};
    }
    if (r.reason == finish_reason::cancelled) return api_error{status::cancelled, {}, "request cancelled"};
    if (r.failure) return from_error_info(*r.failure);
    return api_error{status::internal, {}, "request failed"};
}

std::variant<api_request, api_error> admit_request(http_server::impl& srv, api_kind kind,
                                                   const boost::json::object& body, double& tokenize_s) {
    if (!srv.accepting_work()) {
        return api_error{status::not_ready, {}, srv.draining.load() ? "server is draining" : "server not ready"};
    }
    const auto* model = body.if_contains("model");
    if (model && !model->is_null() && !model->is_string()) return field_error("model", "expected a string");
    auto target = srv.engine.route(model && model->is_string() ? std::string_view(model->get_string()) : "");
    if (!target) return field_error("model", target.error().message, target.code());
    const auto& card = (*target)->card();
    auto parsed = parse_request(kind, body, parse_limits{card.vocab_size});
    if (auto* e = std::get_if<api_error>(&parsed)) return *e;
    auto& req = std::get<api_request>(parsed);
    req.model = card.name;
    req.target = std::move(*target);
    const auto t0 = steady_clock::now();
    prompt_work work;
    auto err = prepare_prompt(req, *req.target, srv.options.default_max_tokens, &work);
    tokenize_s = seconds_between(t0, steady_clock::now());
    srv.metrics.phase_seconds(metrics::phase::tokenize).observe(tokenize_s);
    srv.metrics.tokenize_bytes.inc(double(work.bytes_tokenized));
    if (work.refused_by_bytes) srv.metrics.tokenize_refused.inc();
    if (err) return *err;
    return std::move(req);
}

std::variant<api_request, api_error> admit_body(http_server::impl& srv, api_kind kind, std::string_view body,
                                                double& tokenize_s) {
    boost::system::error_code ec;
    auto v = boost::json::parse(body, ec);
    if (ec) return field_error("body", "invalid JSON (" + ec.message() + ")", status::parse_error);
    if (!v.is_object()) return field_error("body", "expected a JSON object", status::parse_error);
    if (kind != api_kind::responses) return admit_request(srv, kind, v.get_object(), tokenize_s);
    auto chat = responses_to_chat(v.get_object());
    if (auto* e = std::get_if<api_error>(&chat)) return *e;
    return admit_request(srv, api_kind::chat, std::get<boost::json::object>(chat), tokenize_s);
}

namespace {
api_error pool_full() {
    return api_error{status::overloaded, {}, "too many prompts waiting to be tokenized; retry later"};
}
}  // namespace

asio::awaitable<admission> admit_on_pool(http_server::impl& srv, api_kind kind, const boost::json::object& body,
                                         double& tokenize_s) {
    struct outcome {
        admission admitted;
        double tokenize_s = 0;
    };
    auto* s = &srv;
    auto* b = &body;  // the awaiting frame keeps it alive until the job is done
    auto r = co_await srv.prompt_pool->run<outcome>([s, kind, b] {
        outcome o;
        o.admitted = admit_request(*s, kind, *b, o.tokenize_s);
        return o;
    });
    if (!r) co_return pool_full();
    tokenize_s = r->tokenize_s;
    co_return std::move(r->admitted);
}

asio::awaitable<bool> apply_client_stall(const server_options& o, std::string request_id) {
    if (!o.client_stall) co_return true;
    auto stall = o.client_stall(request_id);
    if (!stall) co_return true;
    if (*stall <= 0) co_return false;
    asio::steady_timer t(co_await asio::this_coro::executor,
                         std::chrono::microseconds(static_cast<std::int64_t>(*stall * 1000.0)));
    auto [ec] = co_await t.async_wait(asio::as_tuple(use_awaitable));
    (void)ec;
    co_return true;
}

namespace {
// One of the request's `n` choices: its own engine request (choice 0's id is the
// response's), builder and end.
struct choice_state {
    std::string engine_id;
    std::unique_ptr<response_builder> builder;
    std::optional<actors::generation_result> result;
};

struct generation {
    std::shared_ptr<http_server::impl> srv;
    api_request req;
    std::string id;
    std::shared_ptr<stream_channel> channel;
    std::vector<choice_state> choices;
    std::unique_ptr<responses_stream> responses;  // POST /v1/responses: its rendering; else null
    bool opened = false;         // responses: the opening events were sent
    bool forked = false;         // choices 1.. submitted (once choice 0's prompt is on the device)
    token_clock clock;
    timing_record rec;
    // The request's end: every choice ended (usage summed over them), or the first that failed.
    std::optional<actors::generation_result> result;
    bool overflowed = false;
    bool write_failed = false;
    bool unframed = false;       // HTTP/1.0: the body is not chunked and ends at the close
    bool shut_down = false;      // cut by server stop: ended with shutdown_error()

    bool ok_end(const actors::generation_result& r) const {
        return r.reason == finish_reason::stop || r.reason == finish_reason::length;
    }
    void cancel_all() const {
        for (const auto& c : choices)
            if (!c.result) srv->engine.cancel(c.engine_id);
    }
};

std::string sse(std::string_view json_text) {
    std::string out = "data: ";
    out += json_text;
    out += "\n\n";
    return out;
}

bool cancelled_here(asio::cancellation_state s) { return s.cancelled() != asio::cancellation_type::none; }

// n > 1: choices 1.. are submitted once choice 0 has a token (or has ended), so its
// prompt's KV is on the device and indexed (a running prefix cache entry): each
// copies it (seq copy) and prefills only the last partial block. Each has its own
// seed stream (seed + index when the request gives a seed). A refused choice ends
// the request with its error.
void fork_choices(generation& g) {
    g.forked = true;
    for (std::size_t i = 1; i < g.choices.size(); ++i) {
        auto gen = g.req.gen;
        gen.id = g.choices[i].engine_id;
        if (gen.sampling.seed) gen.sampling.seed = *gen.sampling.seed + i;
        auto submitted = g.req.target->submit(std::move(gen), std::make_shared<channel_sink>(g.channel, i));
        if (!submitted) {
            actors::generation_result failed;
            failed.reason = finish_reason::error;
            failed.failure = submitted.error();
            g.choices[i].result = failed;
            if (!g.result) g.result = failed;
        }
    }
    if (g.result) g.cancel_all();  // a refused fork fails the request: the forks that started stop
}

// The request's end once every choice has ended well: usage summed (the prompt and
// its cached tokens once).
void settle(generation& g) {
    if (g.result) return;
    actors::generation_result all;
    for (std::size_t i = 0; i < g.choices.size(); ++i) {
        const auto& r = g.choices[i].result;
        if (!r) return;
        if (i == 0) {
            all = *r;
        } else {
            all.tokens.completion_tokens += r->tokens.completion_tokens;
        }
    }
    g.result = std::move(all);
}

// What a builder echoes and lists of the prompt (docs/api.md "Scoring"): the prompt text as
// given, or its token ids decoded.
response_builder::scoring scoring_of(const api_request& req, const actors::engine& engine) {
    response_builder::scoring s{req.echo, req.prompt_logprobs, req.gen.prompt, {}};
    if (!req.echo) return s;
    if (const auto* text = std::get_if<std::string>(&req.prompt)) {
        s.prompt_text = *text;
    } else if (auto decoded = engine.decode(req.gen.prompt)) {
        s.prompt_text = std::move(*decoded);
    }
    return s;
}

// max_tokens 0: the engine generated one token (its prefill's) that the answer drops.
void drop_generated(actors::generation_result& r) {
    r.tokens.completion_tokens = 0;
    r.tail_text.clear();
    if (r.reason == finish_reason::stop) r.reason = finish_reason::length;
}

// Applies taken events to the choices; SSE text of them when `sse_out`.
void absorb(generation& g, std::vector<stream_event>& events, std::string* sse_out) {
    for (auto& ev : events) {
        auto& c = g.choices.at(ev.stream);
        if (auto* r = std::get_if<actors::generation_result>(&ev.body); r && g.req.score_only) drop_generated(*r);
        if (auto* t = std::get_if<actors::generated_token>(&ev.body)) {
            if (!g.overflowed && !g.result && !g.req.score_only) {
                g.clock.on_token(g.srv->metrics, ev.at);
                if (!sse_out) {
                    c.builder->add_token(*t);
                } else if (auto chunk = c.builder->token_chunk(*t); !chunk.empty()) {
                    *sse_out += g.responses ? g.responses->on_chunk(chunk) : sse(chunk);
                }
            }
        } else if (auto* r = std::get_if<actors::generation_result>(&ev.body)) {
            c.result = *r;
            if (!g.result && !g.ok_end(*r)) {
                g.result = *r;   // one choice failed: so does the request,
                g.cancel_all();  // and the others stop now, before the error is written
            } else if (!g.result && sse_out && !g.overflowed) {
                const auto chunk = c.builder->finish_chunk(*r);
                *sse_out += g.responses ? g.responses->on_chunk(chunk) : sse(chunk);
            }
        }
        if (ev.stream == 0 && !g.forked) {
            if (g.result || g.overflowed) {
                g.forked = true;  // nothing to fork into: the request is ending
            } else {
                fork_choices(g);
            }
        }
    }
    settle(g);
}

// The tail of an SSE stream once the request ended: the error if it failed, usage, [DONE].
std::string sse_tail(generation& g) {
    std::string out;
    const auto& r = *g.result;
    if (g.responses) {  // the Responses stream ends with its response.* event, no [DONE]
        if (g.overflowed) return out;
        return g.responses->close(r, g.ok_end(r) ? std::nullopt : std::optional(finish_error(r)));
    }
    if (!g.overflowed && !g.ok_end(r)) out += sse(error_json(finish_error(r)));
    if (g.req.include_usage) out += sse(g.choices.front().builder->usage_chunk(r.tokens));
    out += "data: [DONE]\n\n";
    return out;
}

// Turns queued events into SSE text; sets g.result once the request ended.
std::string sse_batch(generation& g, std::vector<stream_event>& events, const std::vector<std::uint64_t>& over) {
    std::string out;
    if (g.responses && !g.opened) {
        g.opened = true;
        out += g.responses->open();
    }
    if (!over.empty() && !g.overflowed) {
        g.overflowed = true;
        g.cancel_all();
        out += sse(error_json(api_error{status::queue_full, {}, "client too slow: stream queue full, cancelled"}));
    }
    absorb(g, events, &out);
    if (g.result) {
        out += sse_tail(g);
    } else if (g.channel->shutting_down()) {  // the server is stopping: say so, then end the stream
        g.shut_down = true;
        out += sse(error_json(shutdown_error()));
        out += "data: [DONE]\n\n";
    }
    return out;
}

asio::awaitable<void> pump_sse(generation& g, beast::tcp_stream& stream) {
    std::vector<stream_event> events;
    std::vector<std::uint64_t> over;
    while (!g.result && !g.shut_down) {
        co_await g.channel->wait();
        if (cancelled_here(co_await asio::this_coro::cancellation_state)) co_return;
        events.clear();
        over.clear();
        g.channel->take(events, over);
        std::string out = sse_batch(g, events, over);
        if (out.empty()) continue;
        const bool consumer_present = co_await apply_client_stall(g.srv->options, g.id);
        if (!consumer_present) {
            g.write_failed = true;  // the consumer vanished
            co_return;
        }
        const auto t0 = steady_clock::now();
        stream.expires_after(g.srv->options.write_timeout);
        beast::error_code ec;
        if (g.unframed) {
            auto [wec, n] = co_await asio::async_write(stream, asio::buffer(out), asio::as_tuple(use_awaitable));
            (void)n;
            ec = wec;
        } else {
            auto [wec, n] = co_await asio::async_write(stream, http::make_chunk(asio::buffer(out)),
                                                       asio::as_tuple(use_awaitable));
            (void)n;
            ec = wec;
        }
        stream.expires_never();
        const double flush = seconds_between(t0, steady_clock::now());
        g.rec.flush_s += flush;
        g.srv->metrics.phase_seconds(metrics::phase::flush).observe(flush);
        if (ec) {
            g.write_failed = true;
            co_return;
        }
    }
}

asio::awaitable<void> pump_aggregate(generation& g) {
    std::vector<stream_event> events;
    std::vector<std::uint64_t> over;
    while (!g.result) {
        co_await g.channel->wait();
        if (cancelled_here(co_await asio::this_coro::cancellation_state)) co_return;
        events.clear();
        over.clear();
        g.channel->take(events, over);
        if (g.channel->shutting_down() && events.empty()) {
            g.shut_down = true;
            co_return;
        }
        if (!over.empty() && !g.overflowed) {
            g.overflowed = true;
            g.cancel_all();
        }
        absorb(g, events, nullptr);
    }
}

// Shared ending: peer gone -> cancel; metrics, timing log.
void finish_generation(generation& g, http_exchange& ex, bool peer_gone, unsigned http_status) {
    g.srv->set_channel(ex.conn_id, nullptr);
    if (peer_gone || !g.result) {
        for (const auto& c : g.choices) g.srv->engine.cancel(c.engine_id);
        g.channel->close();
    } else {
        g.cancel_all();  // one choice failed: the others still running stop
    }
    const auto reason = g.result && !peer_gone ? g.result->reason : finish_reason::cancelled;
    count_outcome(g.srv->metrics, reason);
    const double e2e = seconds_between(ex.received, steady_clock::now());
    g.srv->metrics.e2e_request_latency.observe(e2e);
    if (!g.srv->timing) return;
    auto& rec = g.rec;
    rec.http_status = http_status;
    rec.finish_reason = std::string(finish_reason_name(reason));
    rec.prompt_tokens = static_cast<std::int64_t>(g.req.gen.prompt.size());
    rec.ttft_s = g.clock.ttft_s;
    rec.e2e_s = e2e;
    if (g.result) set_engine_times(rec, *g.result);
    g.srv->timing->write(rec);
}

asio::awaitable<bool> respond_stream(generation& g, http_exchange& ex) {
    http::response<http::empty_body> res{http::status::ok, ex.req.version()};
    res.set(http::field::server, "calserve");
    res.set(http::field::content_type, "text/event-stream");
    res.set(http::field::cache_control, "no-cache");
    res.set("X-Request-Id", g.id);
    for (const auto& [name, value] : cors_headers(*ex.server, ex.req)) res.set(name, value);
    // HTTP/1.0 has no chunked encoding: the events go unframed and the close ends them.
    g.unframed = ex.req.version() < 11;
    res.keep_alive(ex.req.keep_alive() && !g.unframed);
    res.chunked(!g.unframed);
    http::response_serializer<http::empty_body> sr{res};
    g.srv->count_response(200);
    ex.stream.expires_after(g.srv->options.write_timeout);
    auto [ec, n] = co_await http::async_write_header(ex.stream, sr, asio::as_tuple(use_awaitable));
    (void)n;
    ex.stream.expires_never();
    bool peer_gone = static_cast<bool>(ec);
    if (!peer_gone) {
        auto which = co_await (pump_sse(g, ex.stream) || watch_peer(ex.stream, ex.buffer));
        peer_gone = which.index() == 1 || g.write_failed;
    }
    if (!peer_gone && !g.unframed) {
        ex.stream.expires_after(g.srv->options.write_timeout);
        auto [ec2, n2] = co_await asio::async_write(ex.stream, http::make_chunk_last(), asio::as_tuple(use_awaitable));
        (void)n2;
        ex.stream.expires_never();
        peer_gone = static_cast<bool>(ec2);
    }
    finish_generation(g, ex, peer_gone, 200);
    co_return !peer_gone && res.keep_alive() && !g.shut_down;
}

asio::awaitable<bool> respond_aggregate(generation& g, http_exchange& ex) {
    auto which = co_await (pump_aggregate(g) || watch_peer(ex.stream, ex.buffer));
    if (which.index() == 1) {
        finish_generation(g, ex, true, 499);
        co_return false;
    }
    if (!g.result) {  // cut by server stop
        auto e = shutdown_error();
        ex.req.keep_alive(false);
        co_await send_error(ex, e);
        finish_generation(g, ex, false, map_status(e.code).http_status);
        co_return false;
    }
    const auto& r = *g.result;
    bool keep = false;
    unsigned code = 200;
    if (g.overflowed) {
        api_error e{status::queue_full, {}, "response queue overflowed; request cancelled"};
        code = map_status(e.code).http_status;
        keep = co_await send_error(ex, e);
    } else if (g.ok_end(r)) {
        std::string body;
        if (g.responses) {
            body = json_text(g.responses->response_of(g.choices.front().builder->final_object(r), r));
        } else if (g.choices.size() == 1) {
            body = g.choices.front().builder->final_response(r);
        } else {
            std::vector<boost::json::object> finals;
            for (auto& c : g.choices) finals.push_back(c.builder->final_object(*c.result));
            body = combine_choices(std::move(finals), r.tokens);
        }
        keep = co_await send_response(ex, 200, std::move(body));
    } else {
        auto e = finish_error(r);
        code = map_status(e.code).http_status;
        keep = co_await send_error(ex, e);
    }
    finish_generation(g, ex, false, code);
    co_return keep;
}
}  // namespace

asio::awaitable<bool> handle_generate(http_exchange& ex, api_kind kind) {
    auto& srv = *ex.server;
    double tokenize_s = 0;
    // Parsing a large body and tokenizing its prompt happen on the tokenize pool.
    struct outcome {
        admission admitted;
        double tokenize_s = 0;
    };
    auto* s = &srv;
    const std::string* text = &ex.req.body();  // the exchange outlives this await
    auto done = co_await srv.prompt_pool->run<outcome>([s, kind, text] {
        outcome o;
        o.admitted = admit_body(*s, kind, *text, o.tokenize_s);
        return o;
    });
    admission admitted = done ? std::move(done->admitted) : admission{pool_full()};
    if (done) tokenize_s = done->tokenize_s;
    if (admitted.index() == 1) {
        srv.metrics.requests(metrics::outcome::rejected).inc();
        co_return co_await send_error(ex, std::get<api_error>(admitted));
    }
    generation g;
    g.srv = ex.server;
    g.req = std::move(std::get<api_request>(admitted));
    g.id = new_request_id(kind);
    if (kind == api_kind::responses) {  // admitted, so the body is a JSON object
        g.responses = std::make_unique<responses_stream>(g.id, g.req.model, boost::json::parse(ex.req.body()).as_object());
        kind = api_kind::chat;          // generated and built as a chat answer, rendered by g.responses
    }
    g.req.gen.id = g.id;
    ex.request_id = g.id;
    g.channel = std::make_shared<stream_channel>(ex.stream.get_executor(), srv.options.write_queue);
    g.clock.received = ex.received;
    g.rec.id = g.id;
    g.rec.route = g.responses ? "responses" : kind == api_kind::chat ? "chat" : "completions";
    g.rec.stream = g.req.stream;
    g.rec.received_unix = ex.received_unix;
    g.rec.tokenize_s = tokenize_s;
    auto engine = g.req.target;
    for (std::int64_t i = 0; i < g.req.n; ++i) {
        choice_state c;
        c.engine_id = i == 0 ? g.id : g.id + "-" + std::to_string(i);
        c.builder = std::make_unique<response_builder>(
            kind, g.id, g.req.model, g.req.include_usage, g.req.gen.sampling, [engine](actors::token_id t) {
                auto s = engine->decode({t});
                return s ? std::move(*s) : std::string();
            });
        c.builder->set_choice_index(i);
        if (g.req.echo || g.req.prompt_logprobs) c.builder->set_scoring(scoring_of(g.req, *engine));
        if (g.req.output.parses_output(kind)) {
            const auto& o = g.req.output;
            c.builder->parse_output(o.enable_thinking, !o.tools.empty() && o.tool_choice != tool_choice_kind::none);
        }
        g.choices.push_back(std::move(c));
    }
    g.forked = g.req.n == 1;
    auto submitted = g.req.target->submit(g.req.gen, std::make_shared<channel_sink>(g.channel, 0));
    if (!submitted) {
        srv.metrics.requests(metrics::outcome::rejected).inc();
        g.channel->close();
        api_error refusal = from_error_info(submitted.error());
        co_return co_await send_error(ex, refusal);
    }
    srv.set_channel(ex.conn_id, g.channel);
    if (g.req.stream) co_return co_await respond_stream(g, ex);
    co_return co_await respond_aggregate(g, ex);
}

}  // namespace calserve::net
