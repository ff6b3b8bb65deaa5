// THE route table of the HTTP API, its dispatch, and the small routes
// (models, tokenize, detokenize, health, ready, metrics). Generation routes
// live in generate_http.cpp, the WebSocket in ws_session.cpp.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json.hpp>

#include "config/json_text.hpp"
#include "net/console/console_routes.hpp"
#include "net/request_path.hpp"

#ifndef CALSERVE_VERSION  // set for this file by CMakeLists.txt
#define CALSERVE_VERSION "unknown"
#endif

namespace calserve::net {
namespace json = boost::json;

namespace {
using handler_fn = route_reply (*)(http_server::impl&, const http_request&);

// A route: a small route's handler builds its reply synchronously; a generation
// route has no handler and is answered by handle_generate.
struct route {
    http::verb method;
    std::string_view path;
    handler_fn handler;
    std::optional<api_kind> generate;
    bool open;            // reachable without the API key
    bool prefix = false;  // `path` is a prefix: the rest of the path is the route's argument
};

constexpr std::string_view k_models_prefix = "/v1/models/";

using reply = route_reply;

reply error_reply(const api_error& e) { return reply{http_status_of(e), error_json(e)}; }

std::optional<json::object> body_object(const http_request& req, api_error& err) {
    boost::system::error_code ec;
    json::value v = json::parse(req.body(), ec);
    if (ec) {
        err = field_error("body", "invalid JSON (" + ec.message() + ")", status::parse_error);
        return std::nullopt;
    }
    if (!v.is_object()) {
        err = field_error("body", "expected a JSON object", status::parse_error);
        return std::nullopt;
    }
    return std::move(v.get_object());
}

json::object model_object(const actors::model_card& card) {
    return json::object{{"id", card.name},        {"object", "model"},          {"created", 0},
                        {"owned_by", "calserve"}, {"max_model_len", card.usable_context}};
}

reply models(http_server::impl& srv, const http_request&) {
    json::array data;
    for (const auto& card : srv.engine.models()) data.push_back(model_object(card));
    json::object out{{"object", "list"}, {"data", std::move(data)}};
    return reply{200, json_text(out)};
}

// GET /v1/models/{id}: one served model (an id may contain '/', as Hugging Face names do).
reply model_by_id(http_server::impl& srv, const http_request& req) {
    std::string_view target = req.target();
    const auto id = target.substr(0, target.find('?')).substr(k_models_prefix.size());
    for (const auto& card : srv.engine.models()) {
        if (card.name == id) return reply{200, json_text(model_object(card))};
    }
    return error_reply(api_error{status::not_found, "model", "model: no served model " + std::string(id)});
}

reply version(http_server::impl&, const http_request&) {
    return reply{200, json_text(json::object{{"version", CALSERVE_VERSION}})};
}

// The engine of the body's "model" (absent: the only one served).
result<std::shared_ptr<actors::engine>> engine_of(http_server::impl& srv, const json::object& body) {
    const auto* m = body.if_contains("model");
    if (m && !m->is_null() && !m->is_string()) return make_error(status::invalid_argument, "model: expected a string");
    return srv.engine.route(m && m->is_string() ? std::string_view(m->get_string()) : std::string_view{});
}

reply route_error(const error_info& e) {
    return error_reply(field_error("model", e.message, e.code));
}

// The token ids of a /tokenize body: `prompt` (text or token ids, as /v1/completions
// reads it) or `messages` (through the chat template, as /v1/chat/completions with its
// add_generation_prompt and chat_template_kwargs).
result<std::vector<actors::token_id>> tokens_of(const actors::engine& eng, const json::object& body, api_error& err) {
    const bool chat = body.contains("messages");
    auto parsed = parse_request(chat ? api_kind::chat : api_kind::completion, body, {eng.card().vocab_size});
    if (auto* e = std::get_if<api_error>(&parsed)) {
        err = std::move(*e);
        return make_error(err.code, err.message);
    }
    auto& r = std::get<api_request>(parsed);
    if (auto* ids = std::get_if<std::vector<actors::token_id>>(&r.prompt)) return *ids;
    if (auto* text = std::get_if<std::string>(&r.prompt)) return eng.encode(*text);
    auto rendered = eng.apply_chat_template(std::get<std::vector<actors::chat_message>>(r.prompt), r.chat);
    if (!rendered) return rendered.error();
    return eng.encode(*rendered);
}

reply tokenize(http_server::impl& srv, const http_request& req) {
    api_error err;
    auto body = body_object(req, err);
    if (!body) return error_reply(err);
    auto eng = engine_of(srv, *body);
    if (!eng) return route_error(eng.error());
    auto ids = tokens_of(**eng, *body, err);
    if (!ids) return error_reply(err.message.empty() ? from_error_info(ids.error()) : err);
    json::array tokens;
    for (auto id : *ids) tokens.emplace_back(id);
    json::object out{{"count", ids->size()}, {"max_model_len", (*eng)->card().usable_context}};
    out["tokens"] = std::move(tokens);
    return reply{200, json_text(out)};
}

reply detokenize(http_server::impl& srv, const http_request& req) {
    api_error err;
    auto body = body_object(req, err);
    if (!body) return error_reply(err);
    auto eng = engine_of(srv, *body);
    if (!eng) return route_error(eng.error());
    const auto* tokens = body->if_contains("tokens");
    if (!tokens || !tokens->is_array()) return error_reply(field_error("tokens", "expected an array of token ids"));
    std::vector<actors::token_id> ids;
    const auto vocab = (*eng)->card().vocab_size;
    for (std::size_t i = 0; i < tokens->get_array().size(); ++i) {
        const auto& t = tokens->get_array()[i];
        if (!t.is_int64() || t.get_int64() < 0 || (vocab > 0 && t.get_int64() >= vocab)) {
            return error_reply(field_error("tokens[" + std::to_string(i) + "]", "expected a token id in the vocabulary"));
        }
        ids.push_back(static_cast<actors::token_id>(t.get_int64()));
    }
    auto text = (*eng)->decode(ids);
    if (!text) return error_reply(from_error_info(text.error()));
    json::object out;
    out["prompt"] = std::move(*text);
    return reply{200, json_text(out)};
}

reply health(http_server::impl& srv, const http_request&) {
    auto h = srv.engine.health();
    json::object out{{"status", h.healthy ? "ok" : "unhealthy"},
                     {"device_state", h.device_state},
                     {"running", h.running},
                     {"waiting", h.waiting}};
    return reply{h.healthy ? 200u : 503u, json_text(out)};
}

reply ready(http_server::impl& srv, const http_request&) {
    const bool ok = srv.accepting_work();
    json::object out{{"ready", ok}, {"draining", srv.draining.load()}};
    return reply{ok ? 200u : 503u, json_text(out)};
}

reply metrics(http_server::impl& srv, const http_request&) {
    return reply{200, srv.metrics.families.render(), "text/plain; version=0.0.4; charset=utf-8"};
}

// The whole HTTP surface. /v1/ws (WebSocket upgrade) is taken before dispatch
// (net/http_session.cpp). Every GET route also answers HEAD.
constexpr route k_routes[] = {
    {http::verb::post, "/v1/completions", nullptr, api_kind::completion, false},
    {http::verb::post, "/v1/chat/completions", nullptr, api_kind::chat, false},
    {http::verb::post, "/v1/responses", nullptr, api_kind::responses, false},
    {http::verb::get, "/v1/models", models, std::nullopt, false},
    {http::verb::get, k_models_prefix, model_by_id, std::nullopt, false, true},
    {http::verb::get, "/version", version, std::nullopt, true},
    {http::verb::post, "/tokenize", tokenize, std::nullopt, false},
    {http::verb::post, "/detokenize", detokenize, std::nullopt, false},
    {http::verb::get, "/health", health, std::nullopt, true},
    {http::verb::get, "/ready", ready, std::nullopt, true},
    {http::verb::get, "/metrics", metrics, std::nullopt, false},
    // The web console (net/console/): static files open, data keyed; 404 with server.console off.
    {http::verb::get, "/", console_file, std::nullopt, true},
    {http::verb::get, "/console/console.js", console_file, std::nullopt, true},
    {http::verb::get, "/console/console.css", console_file, std::nullopt, true},
    {http::verb::get, "/v1/console/state", console_state_reply, std::nullopt, false},
};
}  // namespace

http::response<http::string_body> make_response(const http_request& req, const server_options& o,
                                                unsigned status_code, std::string body, std::string_view content_type,
                                                const headers_list& extra) {
    http::response<http::string_body> res;
    res.version(req.version() == 0 ? 11 : req.version());
    res.result(status_code);
    res.set(http::field::server, "calserve");
    res.set(http::field::content_type, content_type);
    res.set("X-Content-Type-Options", "nosniff");
    if (content_type.starts_with("text/html")) {
        // The console page: its own script and style only, requests to this origin only
        // (the WebSocket included), never framed. Model output is inserted as text, and
        // this keeps any markup that slipped through from running or loading anything.
        res.set("Content-Security-Policy",
                "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
                "base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
        res.set(http::field::cache_control, "no-cache");
    }
    if (status_code == 429 || status_code == 503) {
        res.set(http::field::retry_after, std::to_string(o.retry_after.count()));
    }
    for (const auto& [name, value] : extra) res.set(name, value);
    res.keep_alive(req.keep_alive());
    res.body() = std::move(body);
    res.prepare_payload();
    return res;
}

asio::awaitable<bool> send_response(http_exchange& ex, unsigned status_code, std::string body,
                                    std::string_view content_type, headers_list extra) {
    for (auto& h : cors_headers(*ex.server, ex.req)) extra.push_back(std::move(h));
    auto res = make_response(ex.req, ex.server->options, status_code, std::move(body), content_type, extra);
    if (!ex.request_id.empty()) res.set("X-Request-Id", ex.request_id);  // the daemon log's name for it
    ex.server->count_response(status_code);
    ex.stream.expires_after(ex.server->options.write_timeout);
    beast::error_code ec;
    if (ex.req.method() == http::verb::head) {  // the GET answer's headers, Content-Length included, no body
        http::response_serializer<http::string_body> sr{res};
        auto [hec, n] = co_await http::async_write_header(ex.stream, sr, asio::as_tuple(asio::use_awaitable));
        (void)n;
        ec = hec;
    } else {
        auto [wec, n] = co_await http::async_write(ex.stream, res, asio::as_tuple(asio::use_awaitable));
        (void)n;
        ec = wec;
    }
    ex.stream.expires_never();
    co_return !ec && res.keep_alive();
}

asio::awaitable<bool> send_error(http_exchange& ex, const api_error& e) {
    co_return co_await send_response(ex, http_status_of(e), error_json(e));
}

namespace {
std::optional<std::string_view> origin_of(const http_request& req) {
    auto it = req.find(http::field::origin);
    if (it == req.end()) return std::nullopt;
    return std::string_view(it->value());
}
}  // namespace

std::optional<api_error> origin_refusal(const http_server::impl& srv, const http_request& req) {
    const auto origin = origin_of(req);
    if (check_origin(srv.origins, origin) != origin_verdict::refused) return std::nullopt;
    api_error e = field_error("Origin",
                              std::string(*origin) + " is not allowed to call this server; list it in "
                                                     "server.allowed_origins (docs/api.md, Browsers and origins)");
    e.http_status = 403;
    return e;
}

headers_list cors_headers(const http_server::impl& srv, const http_request& req) {
    const auto origin = origin_of(req);
    const auto verdict = check_origin(srv.origins, origin);
    if (verdict != origin_verdict::own && verdict != origin_verdict::listed) return {};
    return {{"Access-Control-Allow-Origin", std::string(*origin)}, {"Vary", "Origin"}};
}

namespace {
// OPTIONS: a CORS preflight from an allowed origin (what it may send), or the methods.
reply preflight(const http_server::impl& srv, const http_request& req) {
    reply r{204, {}, "application/json", {{"Allow", "GET, HEAD, POST, OPTIONS"}}};
    for (auto& h : cors_headers(srv, req)) r.headers.push_back(std::move(h));
    if (r.headers.size() == 1) return r;
    r.headers.emplace_back("Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
    // The SDKs send their own headers (x-stainless-*, OpenAI-Organization): the ones asked for are allowed.
    const std::string_view asked = req[http::field::access_control_request_headers];
    r.headers.emplace_back("Access-Control-Allow-Headers",
                           asked.empty() ? std::string("Authorization, Content-Type") : std::string(asked));
    r.headers.emplace_back("Access-Control-Max-Age", "600");
    return r;
}

std::optional<api_error> body_type_refusal(const http_request& req) {
    if (req.method() != http::verb::post) return std::nullopt;
    auto it = req.find(http::field::content_type);
    const auto declared = it == req.end() ? std::nullopt : std::optional<std::string_view>(it->value());
    if (body_type_accepted(declared, origin_of(req).has_value())) return std::nullopt;
    api_error e = field_error("Content-Type", std::string(*declared) + " is not accepted; send application/json");
    e.http_status = 415;
    return e;
}
}  // namespace

routed route_request(http_server::impl& srv, const http_request& req) {
    if (auto refused = origin_refusal(srv, req)) return {std::nullopt, error_reply(*refused)};
    if (req.method() == http::verb::options) return {std::nullopt, preflight(srv, req)};
    std::string_view target = req.target();
    std::string_view path = target.substr(0, target.find('?'));
    // HEAD is answered by the GET route (send_response leaves the body out).
    const auto method = req.method() == http::verb::head ? http::verb::get : req.method();
    const route* by_path = nullptr;
    const route* match = nullptr;
    for (const auto& r : k_routes) {
        if (r.prefix ? !(path.starts_with(r.path) && path.size() > r.path.size()) : r.path != path) continue;
        by_path = &r;
        if (r.method == method) match = &r;
    }
    if (!match && by_path) {
        return {std::nullopt,
                reply{405, error_json(api_error{status::invalid_argument, "method", "method not allowed on this route"})}};
    }
    if (!match) return {std::nullopt, error_reply(api_error{status::not_found, {}, "no route " + std::string(path)})};
    if (!match->open && !srv.authorized(req)) {
        return {std::nullopt, error_reply(api_error{status::unauthorized, {}, "missing or wrong API key"})};
    }
    if (auto refused = body_type_refusal(req)) return {std::nullopt, error_reply(*refused)};
    if (match->generate) return {match->generate, {}};
    return {std::nullopt, match->handler(srv, req)};
}

asio::awaitable<bool> dispatch(http_exchange& ex) {
    routed r = route_request(*ex.server, ex.req);
    if (r.generate) co_return co_await handle_generate(ex, *r.generate);
    co_return co_await send_response(ex, r.reply.status, std::move(r.reply.body), r.reply.content_type,
                                     std::move(r.reply.headers));
}

}  // namespace calserve::net
