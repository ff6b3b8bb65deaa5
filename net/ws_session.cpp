// WebSocket /v1/ws: many generations multiplexed on one socket by client id.
// Protocol (docs/api.md):
//   client -> {"type":"generate","id":"c1", ...completion params...} | {"type":"cancel","id":"c1"}
//   server -> {"type":"started","id","request_id"} {"type":"delta","id","text","token"[,"logprob"]}
//             (chat with thinking or tools: also {"type":"reasoning","id","text"} and
//             {"type":"tool_call","id","index"[,"call_id","name"],"arguments"})
//             {"type":"done","id","finish_reason","usage"} {"type":"error","id","status","error":{...}}
// Each accepted generate ends with exactly one `done` or `error`.
//
// One reader coroutine (client messages) and one writer coroutine (the socket's
// stream_channel) share the connection's strand. All streams of the socket share
// one bounded channel (server.ws_write_queue token events, and
// server.ws_write_queue_bytes for everything queued and not yet written: tokens,
// finishes and the replies to client messages): when it is full, the stream whose
// token did not fit is cancelled with an error event, and the reader stops reading
// client messages until the writer has drained below the byte bound, so a client
// that sends and never reads is pushed back by TCP instead of growing our memory
// (and, no longer read, its traffic no longer keeps the idle timer alive). Other
// sockets have their own channels and are unaffected.
//
// Server stop: the channel is shut down; every running stream gets an `error`
// (503 "server shutting down") and the socket a close frame 1001 (going away).
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>
#include <exception>
#include <unordered_map>

#include "config/json_text.hpp"
#include "net/console/console_routes.hpp"
#include "net/openai_format.hpp"
#include "net/request_path.hpp"

namespace calserve::net {
using namespace boost::asio::experimental::awaitable_operators;
using asio::use_awaitable;
namespace json = boost::json;
namespace websocket = beast::websocket;
using ws_stream = websocket::stream<beast::tcp_stream>;

namespace {
constexpr std::size_t k_max_streams_per_socket = 256;

struct ws_stream_state {
    std::string client_id;
    std::string request_id;
    token_clock clock;
    bool logprobs = false;
    timing_record rec;
    bool ended = false;       // done or error already sent
    // Chat with thinking or tools: the answer is split into reasoning, delta and
    // tool_call events (docs/api.md, WebSocket).
    std::unique_ptr<model::chat_output_parser> parser;
};

struct ws_session {
    std::shared_ptr<http_server::impl> srv;
    std::shared_ptr<ws_stream> ws;
    std::shared_ptr<stream_channel> channel;
    std::unordered_map<std::uint64_t, ws_stream_state> streams;   // live streams by key
    std::unordered_map<std::string, std::uint64_t> by_client_id;  // client id -> key
    std::uint64_t next_key = 1;

    void reply(std::string text) { channel->push(stream_event{0, std::move(text), steady_clock::now()}); }
    void reply_error(std::string_view id, const api_error& e) {
        json::object err{{"message", e.message},
                         {"type", map_status(e.code).type},
                         {"param", e.param.empty() ? json::value(nullptr) : json::value(e.param)},
                         {"code", to_string(e.code)}};
        json::object o{{"type", "error"}, {"id", id}, {"status", map_status(e.code).http_status}};
        o["error"] = std::move(err);
        reply(json_text(o));
    }
    // A generate that passed the socket's own checks; its prompt work (template,
    // tokenizer) runs on the tokenize pool before start_stream.
    struct pending_generate {
        json::value msg;
        std::string id;
        api_kind kind = api_kind::completion;
        steady_clock::time_point received;
    };
    std::optional<pending_generate> on_message(std::string_view text);
    std::optional<pending_generate> on_generate(json::value msg, std::string id);
    void start_stream(pending_generate g, admission admitted, double tokenize_s);
    void on_cancel(const std::string& id);
    void end_stream(std::uint64_t key, const actors::generation_result* r, const api_error* e);
    std::string render(const stream_event& ev, std::vector<std::string>& extra);
};

std::optional<ws_session::pending_generate> ws_session::on_message(std::string_view text) {
    boost::system::error_code ec;
    auto v = json::parse(text, ec);
    if (ec || !v.is_object()) {
        reply_error("", field_error("message", "expected a JSON object", status::parse_error));
        return std::nullopt;
    }
    const auto& o = v.get_object();
    const auto* type = o.if_contains("type");
    const auto* id = o.if_contains("id");
    std::string sid = id && id->is_string() ? std::string(id->get_string()) : std::string();
    if (!id || !id->is_string() || sid.empty()) {
        reply_error("", field_error("id", "expected a non-empty string"));
        return std::nullopt;
    }
    if (!type || !type->is_string()) {
        reply_error(sid, field_error("type", "expected \"generate\" or \"cancel\""));
    } else if (type->get_string() == "generate") {
        return on_generate(std::move(v), std::move(sid));
    } else if (type->get_string() == "cancel") {
        on_cancel(sid);
    } else {
        reply_error(sid, field_error("type", "expected \"generate\" or \"cancel\""));
    }
    return std::nullopt;
}

std::optional<ws_session::pending_generate> ws_session::on_generate(json::value msg, std::string id) {
    if (by_client_id.contains(id)) {
        reply_error(id, field_error("id", "a stream with this id is still running"));
        return std::nullopt;
    }
    if (streams.size() >= k_max_streams_per_socket) {
        reply_error(id, api_error{status::overloaded, {}, "too many streams on this socket"});
        return std::nullopt;
    }
    const api_kind kind = msg.get_object().contains("messages") ? api_kind::chat : api_kind::completion;
    return pending_generate{std::move(msg), std::move(id), kind, steady_clock::now()};
}

// The prompt work of a generate: on the tokenize pool when the server has one (the
// reader waits for it, so a socket's messages keep their order), else in place.
asio::awaitable<void> admit_generate(ws_session& s, ws_session::pending_generate g) {
    double tokenize_s = 0;
    // Not a conditional expression: GCC 12 destroys a co_await's temporary twice there.
    if (s.srv->prompt_pool) {
        auto admitted = co_await admit_on_pool(*s.srv, g.kind, g.msg.get_object(), tokenize_s);
        s.start_stream(std::move(g), std::move(admitted), tokenize_s);
    } else {
        s.start_stream(std::move(g), admit_request(*s.srv, g.kind, g.msg.get_object(), tokenize_s), tokenize_s);
    }
}

void ws_session::start_stream(pending_generate g, admission admitted, double tokenize_s) {
    auto& id = g.id;
    const auto received = g.received;
    const auto kind = g.kind;
    if (auto* e = std::get_if<api_error>(&admitted)) {
        srv->metrics.requests(metrics::outcome::rejected).inc();
        reply_error(id, *e);
        return;
    }
    auto& req = std::get<api_request>(admitted);
    if (req.n != 1) {
        // One stream is one choice here; the HTTP API returns n choices in one response.
        srv->metrics.requests(metrics::outcome::rejected).inc();
        reply_error(id, field_error("n", "a WebSocket stream is one choice: ask for n > 1 on the HTTP API"));
        return;
    }
    if (req.echo || req.prompt_logprobs || req.score_only) {
        // A stream carries tokens; a prompt's scores come with a whole answer.
        srv->metrics.requests(metrics::outcome::rejected).inc();
        reply_error(id, field_error(req.echo ? "echo" : req.prompt_logprobs ? "prompt_logprobs" : "max_tokens",
                                    "scoring a prompt is served by the HTTP API (non-streaming), not on a WebSocket stream"));
        return;
    }
    const auto key = next_key++;
    ws_stream_state st;
    st.client_id = id;
    st.request_id = new_request_id(kind);
    st.clock.received = received;
    st.logprobs = req.gen.sampling.logprobs;
    if (req.output.parses_output(kind)) {
        const bool tools = !req.output.tools.empty() && req.output.tool_choice != tool_choice_kind::none;
        st.parser = std::make_unique<model::chat_output_parser>(model::chat_output_options{
            req.output.enable_thinking, tools, "call_" + st.request_id.substr(st.request_id.find('-') + 1) + "_"});
    }
    st.rec.id = st.request_id;
    st.rec.route = "ws";
    st.rec.stream = true;
    st.rec.tokenize_s = tokenize_s;
    st.rec.prompt_tokens = static_cast<std::int64_t>(req.gen.prompt.size());
    st.rec.received_unix =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    req.gen.id = st.request_id;
    // `started` goes first in the queue, ahead of the tokens the engine may push at once;
    // a refused submit takes it back (nothing was taken meanwhile: this runs on the strand).
    channel->push(stream_event{key, json_text(json::object{{"type", "started"}, {"id", id},
                                                                 {"request_id", st.request_id}}),
                               steady_clock::now()});
    auto submitted = req.target->submit(std::move(req.gen), std::make_shared<channel_sink>(channel, key));
    if (!submitted) {
        channel->discard(key);
        srv->metrics.requests(metrics::outcome::rejected).inc();
        reply_error(id, from_error_info(submitted.error()));
        return;
    }
    by_client_id.emplace(id, key);
    streams.emplace(key, std::move(st));
}

void ws_session::on_cancel(const std::string& id) {
    auto it = by_client_id.find(id);
    if (it == by_client_id.end()) {
        reply_error(id, field_error("id", "no running stream with this id", status::not_found));
        return;
    }
    // The engine answers with a finish (cancelled), which becomes this stream's `done`.
    srv->engine.cancel(streams.at(it->second).request_id);
}

void ws_session::end_stream(std::uint64_t key, const actors::generation_result* r, const api_error* e) {
    auto it = streams.find(key);
    if (it == streams.end()) return;
    auto& st = it->second;
    if (e) {
        reply_error(st.client_id, *e);
    } else {
        json::object usage{{"prompt_tokens", r->tokens.prompt_tokens},
                           {"completion_tokens", r->tokens.completion_tokens},
                           {"total_tokens", r->tokens.prompt_tokens + r->tokens.completion_tokens},
                           {"prompt_tokens_details", json::object{{"cached_tokens", r->tokens.cached_tokens}}}};
        const bool calls = st.parser && st.parser->tool_calls() > 0 && r->reason == actors::finish_reason::stop;
        json::object o{{"type", "done"},
                       {"id", st.client_id},
                       {"finish_reason", calls ? std::string_view("tool_calls") : finish_reason_name(r->reason)}};
        o["usage"] = std::move(usage);
        reply(json_text(o));
    }
    const auto reason = r ? r->reason : actors::finish_reason::cancelled;
    count_outcome(srv->metrics, reason);
    const double e2e = seconds_between(st.clock.received, steady_clock::now());
    srv->metrics.e2e_request_latency.observe(e2e);
    if (srv->timing) {
        st.rec.finish_reason = e ? std::string(to_string(e->code)) : std::string(finish_reason_name(reason));
        st.rec.http_status = e ? map_status(e->code).http_status : 200;
        st.rec.ttft_s = st.clock.ttft_s;
        st.rec.e2e_s = e2e;
        if (r) set_engine_times(st.rec, *r);
        srv->timing->write(st.rec);
    }
    by_client_id.erase(st.client_id);
    streams.erase(it);
}

namespace {
// The events of one parsed piece of answer: reasoning, delta (content), tool_call.
void parsed_events(const ws_stream_state& st, const model::chat_delta& d, const actors::generated_token* t,
                   std::vector<std::string>& out) {
    if (!d.reasoning.empty()) {
        out.push_back(json_text(json::object{{"type", "reasoning"}, {"id", st.client_id}, {"text", d.reasoning}}));
    }
    if (!d.content.empty()) {
        json::object o{{"type", "delta"}, {"id", st.client_id}, {"text", d.content}};
        if (t) o["token"] = t->token;
        if (t && st.logprobs) o["logprob"] = t->logprob;
        out.push_back(json_text(o));
    }
    for (const auto& c : d.tool_calls) {
        json::object o{{"type", "tool_call"}, {"id", st.client_id}, {"index", c.index}};
        if (c.opens) {
            o["call_id"] = c.id;
            o["name"] = c.name;
        }
        o["arguments"] = c.arguments;
        out.push_back(json_text(o));
    }
}
}  // namespace

// Renders one event to its wire message (empty = nothing to send); a finish may add
// its held-back tail as an extra delta before the `done` it queues through end_stream.
std::string ws_session::render(const stream_event& ev, std::vector<std::string>& extra) {
    if (auto* text = std::get_if<std::string>(&ev.body)) return *text;
    auto it = streams.find(ev.stream);
    if (it == streams.end()) return {};  // already ended (overflow error sent)
    auto& st = it->second;
    if (auto* t = std::get_if<actors::generated_token>(&ev.body)) {
        st.clock.on_token(srv->metrics, ev.at);
        if (st.parser) {
            parsed_events(st, st.parser->push(t->text), t, extra);
            return {};
        }
        json::object o{{"type", "delta"}, {"id", st.client_id}, {"text", t->text}, {"token", t->token}};
        if (st.logprobs) o["logprob"] = t->logprob;
        return json_text(o);
    }
    const auto& r = std::get<actors::generation_result>(ev.body);
    if (st.parser) {
        parsed_events(st, st.parser->push(r.tail_text), nullptr, extra);
        parsed_events(st, st.parser->finish(), nullptr, extra);
    } else if (!r.tail_text.empty()) {
        extra.push_back(json_text(json::object{{"type", "delta"}, {"id", st.client_id}, {"text", r.tail_text}}));
    }
    using actors::finish_reason;
    if (r.reason == finish_reason::stop || r.reason == finish_reason::length || r.reason == finish_reason::cancelled) {
        end_stream(ev.stream, &r, nullptr);
    } else {
        auto e = finish_error(r);
        end_stream(ev.stream, &r, &e);
    }
    return {};
}

asio::awaitable<void> ws_reader(ws_session& s) {
    beast::flat_buffer buf;
    for (;;) {
        co_await s.channel->wait_room();  // back-pressure: nothing is read while the queue is full
        auto cs = co_await asio::this_coro::cancellation_state;
        if (cs.cancelled() != asio::cancellation_type::none) co_return;
        auto [ec, n] = co_await s.ws->async_read(buf, asio::as_tuple(use_awaitable));
        (void)n;
        if (ec) co_return;
        auto pending = s.on_message(std::string_view(static_cast<const char*>(buf.data().data()), buf.size()));
        buf.consume(buf.size());
        if (pending) co_await admit_generate(s, std::move(*pending));
    }
}

// Server stop: every running stream ends with the shutdown error (queued as replies).
void end_all_for_shutdown(ws_session& s) {
    std::vector<std::uint64_t> keys;
    for (const auto& [key, st] : s.streams) keys.push_back(key);
    const auto e = shutdown_error();
    for (auto key : keys) {
        s.srv->engine.cancel(s.streams.at(key).request_id);
        s.channel->mute(key);
        s.end_stream(key, nullptr, &e);
    }
}

asio::awaitable<void> ws_writer(ws_session& s) {
    std::vector<stream_event> events;
    std::vector<std::uint64_t> over;
    std::vector<std::string> extra;
    bool closing = false;  // shutdown errors queued: close once they are written
    for (;;) {
        co_await s.channel->wait();
        auto cs = co_await asio::this_coro::cancellation_state;
        if (cs.cancelled() != asio::cancellation_type::none) co_return;
        events.clear();
        over.clear();
        s.channel->take(events, over);
        if (events.empty() && over.empty() && closing) {
            auto [ec] = co_await s.ws->async_close(websocket::close_code::going_away, asio::as_tuple(use_awaitable));
            (void)ec;
            co_return;
        }
        for (auto key : over) {
            auto it = s.streams.find(key);
            if (it == s.streams.end()) continue;
            s.srv->engine.cancel(it->second.request_id);
            api_error e{status::queue_full, {}, "client too slow: WebSocket write queue full, stream cancelled"};
            s.end_stream(key, nullptr, &e);   // queues the error; later events of this key are skipped
        }
        for (const auto& ev : events) {
            extra.clear();
            if (ev.is_token() && s.streams.contains(ev.stream)) {
                const bool consumer_present =
                    co_await apply_client_stall(s.srv->options, s.streams.at(ev.stream).request_id);
                if (!consumer_present) co_return;  // vanished: the session ends and cancels its streams
            }
            std::string msg = s.render(ev, extra);
            if (!msg.empty()) extra.insert(extra.begin(), std::move(msg));
            for (const auto& m : extra) {
                auto [ec, n] = co_await s.ws->async_write(asio::buffer(m), asio::as_tuple(use_awaitable));
                (void)n;
                if (ec) co_return;
            }
            s.channel->release(ev.bytes);
        }
        if (!closing && s.channel->shutting_down()) {
            closing = true;
            end_all_for_shutdown(s);  // queues the errors: the next take writes them, then the close
        }
    }
}
}  // namespace

asio::awaitable<void> run_websocket(std::shared_ptr<http_server::impl> srv, std::uint64_t conn_id,
                                    beast::tcp_stream stream, http_request req) {
    ws_session s;
    s.srv = srv;
    s.ws = std::make_shared<ws_stream>(std::move(stream));
    auto exec = s.ws->get_executor();
    std::weak_ptr<ws_stream> weak = s.ws;
    srv->set_conn(conn_id, [weak, exec] {
        asio::post(exec, [weak] {
            if (auto w = weak.lock()) {
                beast::error_code ignored;
                w->next_layer().socket().shutdown(tcp::socket::shutdown_both, ignored);
                w->next_layer().socket().close(ignored);
            }
        });
    });
    s.channel = std::make_shared<stream_channel>(exec, srv->options.write_queue, srv->options.ws_queue_bytes,
                                                 &srv->ws_queued_bytes);
    // Pings on an idle socket; a peer that stops reading stops answering them and is
    // closed after the idle timeout, which ends a write blocked on a silent client.
    websocket::stream_base::timeout limits{};
    limits.handshake_timeout = srv->options.write_timeout;
    limits.idle_timeout = std::max<std::chrono::seconds>(srv->options.idle_timeout, std::chrono::seconds(10));
    limits.keep_alive_pings = true;
    s.ws->set_option(limits);
    s.ws->read_message_max(srv->options.max_body_bytes);
    s.ws->text(true);
    if (ws_offers_calserve(req)) {  // a browser offering subprotocols needs one named back
        s.ws->set_option(websocket::stream_base::decorator(
            [](websocket::response_type& res) { res.set(http::field::sec_websocket_protocol, "calserve"); }));
    }
    auto [ec] = co_await s.ws->async_accept(req, asio::as_tuple(use_awaitable));
    if (!ec) {
        srv->set_channel(conn_id, s.channel);
        co_await (ws_reader(s) || ws_writer(s));
        srv->set_channel(conn_id, nullptr);
    }
    // The socket is gone or closing: cancel what is still running; its finish events are dropped.
    s.channel->close();
    for (auto& [key, st] : s.streams) {
        srv->engine.cancel(st.request_id);
        srv->metrics.requests(metrics::outcome::cancelled).inc();
    }
    if (!ec) {
        beast::error_code ignored;
        s.ws->next_layer().socket().shutdown(tcp::socket::shutdown_both, ignored);
    }
}

namespace {
// ws_replies' reader and writer in one: each message handed to the session, then
// everything it queued taken, rendered and released as ws_writer does.
asio::awaitable<void> feed_messages(ws_session& s, const std::vector<std::string_view>& messages,
                                    std::vector<std::string>& out) {
    std::vector<stream_event> events;
    std::vector<std::uint64_t> over;
    std::vector<std::string> extra;
    for (auto text : messages) {
        if (auto pending = s.on_message(text)) co_await admit_generate(s, std::move(*pending));
        for (;;) {   // until rendering queues nothing more (a finish queues its `done`)
            events.clear();
            over.clear();
            s.channel->take(events, over);
            if (events.empty() && over.empty()) break;
            for (auto key : over) {
                auto it = s.streams.find(key);
                if (it == s.streams.end()) continue;
                s.srv->engine.cancel(it->second.request_id);
                api_error e{status::queue_full, {}, "client too slow: WebSocket write queue full, stream cancelled"};
                s.end_stream(key, nullptr, &e);
            }
            for (const auto& ev : events) {
                extra.clear();
                std::string msg = s.render(ev, extra);
                if (!msg.empty()) out.push_back(std::move(msg));
                out.insert(out.end(), extra.begin(), extra.end());
                s.channel->release(ev.bytes);
            }
        }
    }
    co_return;
}
}  // namespace

std::vector<std::string> ws_replies(std::shared_ptr<http_server::impl> srv,
                                    const std::vector<std::string_view>& messages) {
    ws_session s;
    s.srv = std::move(srv);
    auto& ioc = s.srv->ioc;
    s.channel = std::make_shared<stream_channel>(ioc.get_executor(), s.srv->options.write_queue,
                                                 s.srv->options.ws_queue_bytes, &s.srv->ws_queued_bytes);
    std::vector<std::string> out;
    std::exception_ptr failed;
    // Held until the feed ends: the io_context has no other work while a prompt is on the pool.
    auto work = asio::make_work_guard(ioc);
    asio::co_spawn(ioc, feed_messages(s, messages, out), [&](std::exception_ptr e) {
        failed = e;
        work.reset();
    });
    ioc.restart();
    ioc.run();
    s.channel->close();
    for (auto& [key, st] : s.streams) s.srv->engine.cancel(st.request_id);
    if (failed) std::rethrow_exception(failed);
    return out;
}

}  // namespace calserve::net
