// THE route table of the HTTP API, its dispatch, and the small routes
// (models, tokenize, detokenize, health, ready, metrics). Generation routes
// live in generate_http.cpp, the WebSocket in ws_session.cpp.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json.hpp>

#include "net/server_impl.hpp"

namespace calserve::net {
namespace json = boost::json;

namespace {
using handler_fn = asio::awaitable<bool> (*)(http_exchange&);

struct route {
    http::verb method;
    std::string_view path;
    handler_fn handler;
    bool open;   // reachable without the API key
};

// A finished answer of a small route. Handlers build it synchronously and one
// co_await sends it (named, so no temporary lives across the suspension).
struct reply {
    unsigned status = 200;
    std::string body;
    std::string_view content_type = "application/json";
};

reply error_reply(const api_error& e) { return reply{map_status(e.code).http_status, error_json(e)}; }

std::optional<json::object> body_object(const http_exchange& ex, api_error& err) {
    boost::system::error_code ec;
    json::value v = json::parse(ex.req.body(), ec);
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

reply models(http_exchange& ex) {
    const auto& card = ex.server->engine.card();
    json::object m{{"id", card.name},        {"object", "model"},          {"created", 0},
                   {"owned_by", "calserve"}, {"max_model_len", card.usable_context}};
    json::object out{{"object", "list"}, {"data", json::array{m}}};
    return reply{200, json::serialize(out)};
}

reply tokenize(http_exchange& ex) {
    api_error err;
    auto body = body_object(ex, err);
    if (!body) return error_reply(err);
    const auto* prompt = body->if_contains("prompt");
    if (!prompt || !prompt->is_string()) return error_reply(field_error("prompt", "expected a string"));
    auto ids = ex.server->engine.encode(prompt->get_string());
    if (!ids) return error_reply(from_error_info(ids.error()));
    json::array tokens;
    for (auto id : *ids) tokens.emplace_back(id);
    json::object out{{"count", ids->size()}, {"max_model_len", ex.server->engine.card().usable_context}};
    out["tokens"] = std::move(tokens);
    return reply{200, json::serialize(out)};
}

reply detokenize(http_exchange& ex) {
    api_error err;
    auto body = body_object(ex, err);
    if (!body) return error_reply(err);
    const auto* tokens = body->if_contains("tokens");
    if (!tokens || !tokens->is_array()) return error_reply(field_error("tokens", "expected an array of token ids"));
    std::vector<actors::token_id> ids;
    const auto vocab = ex.server->engine.card().vocab_size;
    for (std::size_t i = 0; i < tokens->get_array().size(); ++i) {
        const auto& t = tokens->get_array()[i];
        if (!t.is_int64() || t.get_int64() < 0 || (vocab > 0 && t.get_int64() >= vocab)) {
            return error_reply(field_error("tokens[" + std::to_string(i) + "]", "expected a token id in the vocabulary"));
        }
        ids.push_back(static_cast<actors::token_id>(t.get_int64()));
    }
    auto text = ex.server->engine.decode(ids);
    if (!text) return error_reply(from_error_info(text.error()));
    json::object out;
    out["prompt"] = std::move(*text);
    return reply{200, json::serialize(out)};
}

reply health(http_exchange& ex) {
    auto h = ex.server->engine.health();
    json::object out{{"status", h.healthy ? "ok" : "unhealthy"},
                     {"device_state", h.device_state},
                     {"running", h.running},
                     {"waiting", h.waiting}};
    return reply{h.healthy ? 200u : 503u, json::serialize(out)};
}

reply ready(http_exchange& ex) {
    const bool ok = ex.server->accepting_work();
    json::object out{{"ready", ok}, {"draining", ex.server->draining.load()}};
    return reply{ok ? 200u : 503u, json::serialize(out)};
}

reply metrics(http_exchange& ex) {
    return reply{200, ex.server->metrics.families.render(), "text/plain; version=0.0.4; charset=utf-8"};
}

asio::awaitable<bool> send_reply(http_exchange& ex, reply& r) {
    co_return co_await send_response(ex, r.status, std::move(r.body), r.content_type);
}

template <reply (*fn)(http_exchange&)>
asio::awaitable<bool> sync_route(http_exchange& ex) {
    reply r = fn(ex);
    co_return co_await send_reply(ex, r);
}

asio::awaitable<bool> on_completions(http_exchange& ex) { return handle_generate(ex, api_kind::completion); }
asio::awaitable<bool> on_chat(http_exchange& ex) { return handle_generate(ex, api_kind::chat); }

// The whole HTTP surface. /v1/ws (WebSocket upgrade) is taken before dispatch
// (net/http_session.cpp). Every GET route also answers HEAD.
constexpr route k_routes[] = {
    {http::verb::post, "/v1/completions", on_completions, false},
    {http::verb::post, "/v1/chat/completions", on_chat, false},
    {http::verb::get, "/v1/models", sync_route<models>, false},
    {http::verb::post, "/tokenize", sync_route<tokenize>, false},
    {http::verb::post, "/detokenize", sync_route<detokenize>, false},
    {http::verb::get, "/health", sync_route<health>, true},
    {http::verb::get, "/ready", sync_route<ready>, true},
    {http::verb::get, "/metrics", sync_route<metrics>, false},
};
}  // namespace

asio::awaitable<bool> send_response(http_exchange& ex, unsigned status_code, std::string body,
                                    std::string_view content_type) {
    http::response<http::string_body> res;
    res.version(ex.req.version() == 0 ? 11 : ex.req.version());
    res.result(status_code);
    res.set(http::field::server, "calserve");
    res.set(http::field::content_type, content_type);
    if (status_code == 429 || status_code == 503) {
        res.set(http::field::retry_after, std::to_string(ex.server->options.retry_after.count()));
    }
    res.keep_alive(ex.req.keep_alive());
    res.body() = std::move(body);
    res.prepare_payload();
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

asio::awaitable<bool> dispatch(http_exchange& ex) {
    std::string_view target = ex.req.target();
    std::string_view path = target.substr(0, target.find('?'));
    // HEAD is answered by the GET route (send_response leaves the body out).
    const auto method = ex.req.method() == http::verb::head ? http::verb::get : ex.req.method();
    const route* by_path = nullptr;
    const route* match = nullptr;
    for (const auto& r : k_routes) {
        if (r.path != path) continue;
        by_path = &r;
        if (r.method == method) match = &r;
    }
    reply refusal;
    if (!match && by_path) {
        refusal = reply{405, error_json(api_error{status::invalid_argument, "method", "method not allowed on this route"})};
    } else if (!match) {
        refusal = error_reply(api_error{status::not_found, {}, "no route " + std::string(path)});
    } else if (!match->open && !ex.server->authorized(ex.req)) {
        refusal = error_reply(api_error{status::unauthorized, {}, "missing or wrong API key"});
    } else {
        co_return co_await match->handler(ex);
    }
    co_return co_await send_reply(ex, refusal);
}

}  // namespace calserve::net
