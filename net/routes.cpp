// THE route table of the HTTP API, its dispatch, and the small routes
// (models, tokenize, detokenize, health, ready, metrics). Generation routes
// live in generate_http.cpp, the WebSocket in ws_session.cpp.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json.hpp>

#include "net/console/console_routes.hpp"
#include "net/request_path.hpp"

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
    bool open;   // reachable without the API key
};

using reply = route_reply;

reply error_reply(const api_error& e) { return reply{map_status(e.code).http_status, error_json(e)}; }

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

reply models(http_server::impl& srv, const http_request&) {
    json::array data;
    for (const auto& card : srv.engine.models())
        data.push_back(json::object{{"id", card.name},        {"object", "model"},          {"created", 0},
                                    {"owned_by", "calserve"}, {"max_model_len", card.usable_context}});
    json::object out{{"object", "list"}, {"data", std::move(data)}};
    return reply{200, json::serialize(out)};
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

reply tokenize(http_server::impl& srv, const http_request& req) {
    api_error err;
    auto body = body_object(req, err);
    if (!body) return error_reply(err);
    auto eng = engine_of(srv, *body);
    if (!eng) return route_error(eng.error());
    const auto* prompt = body->if_contains("prompt");
    if (!prompt || !prompt->is_string()) return error_reply(field_error("prompt", "expected a string"));
    auto ids = (*eng)->encode(prompt->get_string());
    if (!ids) return error_reply(from_error_info(ids.error()));
    json::array tokens;
    for (auto id : *ids) tokens.emplace_back(id);
    json::object out{{"count", ids->size()}, {"max_model_len", (*eng)->card().usable_context}};
    out["tokens"] = std::move(tokens);
    return reply{200, json::serialize(out)};
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
    return reply{200, json::serialize(out)};
}

reply health(http_server::impl& srv, const http_request&) {
    auto h = srv.engine.health();
    json::object out{{"status", h.healthy ? "ok" : "unhealthy"},
                     {"device_state", h.device_state},
                     {"running", h.running},
                     {"waiting", h.waiting}};
    return reply{h.healthy ? 200u : 503u, json::serialize(out)};
}

reply ready(http_server::impl& srv, const http_request&) {
    const bool ok = srv.accepting_work();
    json::object out{{"ready", ok}, {"draining", srv.draining.load()}};
    return reply{ok ? 200u : 503u, json::serialize(out)};
}

reply metrics(http_server::impl& srv, const http_request&) {
    return reply{200, srv.metrics.families.render(), "text/plain; version=0.0.4; charset=utf-8"};
}

// The whole HTTP surface. /v1/ws (WebSocket upgrade) is taken before dispatch
// (net/http_session.cpp). Every GET route also answers HEAD.
constexpr route k_routes[] = {
    {http::verb::post, "/v1/completions", nullptr, api_kind::completion, false},
    {http::verb::post, "/v1/chat/completions", nullptr, api_kind::chat, false},
    {http::verb::get, "/v1/models", models, std::nullopt, false},
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
                                                unsigned status_code, std::string body, std::string_view content_type) {
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
    res.keep_alive(req.keep_alive());
    res.body() = std::move(body);
    res.prepare_payload();
    return res;
}

asio::awaitable<bool> send_response(http_exchange& ex, unsigned status_code, std::string body,
                                    std::string_view content_type) {
    auto res = make_response(ex.req, ex.server->options, status_code, std::move(body), content_type);
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

routed route_request(http_server::impl& srv, const http_request& req) {
    std::string_view target = req.target();
    std::string_view path = target.substr(0, target.find('?'));
    // HEAD is answered by the GET route (send_response leaves the body out).
    const auto method = req.method() == http::verb::head ? http::verb::get : req.method();
    const route* by_path = nullptr;
    const route* match = nullptr;
    for (const auto& r : k_routes) {
        if (r.path != path) continue;
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
    if (match->generate) return {match->generate, {}};
    return {std::nullopt, match->handler(srv, req)};
}

asio::awaitable<bool> dispatch(http_exchange& ex) {
    routed r = route_request(*ex.server, ex.req);
    if (r.generate) co_return co_await handle_generate(ex, *r.generate);
    co_return co_await send_response(ex, r.reply.status, std::move(r.reply.body), r.reply.content_type);
}

}  // namespace calserve::net
