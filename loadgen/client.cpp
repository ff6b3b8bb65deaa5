#include "loadgen/client.hpp"
#include "config/json_text.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include "loadgen/sse.hpp"

namespace calserve::loadgen {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;

result<endpoint> parse_url(std::string_view url) {
    constexpr std::string_view scheme = "http://";
    if (url.substr(0, scheme.size()) != scheme)
        return make_error(status::invalid_argument, "url: only http://host[:port][/prefix] is supported");
    auto rest = url.substr(scheme.size());
    const auto slash = rest.find('/');
    auto hostport = rest.substr(0, slash);
    endpoint ep;
    if (slash != std::string_view::npos) ep.base = std::string(rest.substr(slash));
    while (!ep.base.empty() && ep.base.back() == '/') ep.base.pop_back();
    const auto colon = hostport.rfind(':');
    if (colon == std::string_view::npos) {
        ep.host = std::string(hostport);
        ep.port = "80";
    } else {
        ep.host = std::string(hostport.substr(0, colon));
        ep.port = std::string(hostport.substr(colon + 1));
    }
    if (ep.host.empty() || ep.port.empty() || ep.port.find_first_not_of("0123456789") != std::string::npos)
        return make_error(status::invalid_argument, "url: bad host or port in '" + std::string(url) + "'");
    return ep;
}

namespace {

http::request<http::string_body> make_request(const endpoint& ep, bool post, const std::string& path,
                                              const std::string& body) {
    http::request<http::string_body> req{post ? http::verb::post : http::verb::get, ep.base + path, 11};
    req.set(http::field::host, ep.host);
    req.set(http::field::user_agent, "calserve-bench");
    if (post) req.set(http::field::content_type, "application/json");
    if (!ep.api_key.empty()) req.set(http::field::authorization, "Bearer " + ep.api_key);
    req.body() = body;
    req.prepare_payload();
    return req;
}

result<void> connect(beast::tcp_stream& stream, asio::io_context& ioc, const endpoint& ep) {
    boost::system::error_code ec;
    tcp::resolver resolver(ioc);
    const auto hits = resolver.resolve(ep.host, ep.port, ec);
    if (ec) return make_error(status::io_error, "resolve " + ep.host + ": " + ec.message());
    stream.connect(hits, ec);
    if (ec) return make_error(status::io_error, "connect " + ep.host + ":" + ep.port + ": " + ec.message());
    return {};
}

double seconds_since(bench_clock::time_point origin) {
    return std::chrono::duration<double>(bench_clock::now() - origin).count();
}

}  // namespace

result<http_reply> http_call(const endpoint& ep, bool post, const std::string& path, const std::string& body,
                             std::chrono::milliseconds timeout) {
    asio::io_context ioc;
    beast::tcp_stream stream(ioc);
    stream.expires_after(timeout);
    if (auto c = connect(stream, ioc, ep); !c) return c.error();
    boost::system::error_code ec;
    http::write(stream, make_request(ep, post, path, body), ec);
    if (ec) return make_error(status::io_error, "write: " + ec.message());
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(256 * 1024 * 1024);
    http::read(stream, buf, parser, ec);
    if (ec) return make_error(status::io_error, "read " + path + ": " + ec.message());
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    return http_reply{static_cast<int>(parser.get().result_int()), parser.get().body()};
}

result<server_info> parse_models(std::string_view body) {
    boost::system::error_code ec;
    const auto v = json::parse(body, ec);
    const auto* data = (!ec && v.is_object()) ? v.get_object().if_contains("data") : nullptr;
    if (data == nullptr || !data->is_array() || data->get_array().empty() || !data->get_array()[0].is_object())
        return make_error(status::parse_error, "/v1/models: no model listed");
    const auto& m = data->get_array()[0].get_object();
    server_info info;
    if (const auto* id = m.if_contains("id"); id != nullptr && id->is_string()) info.model = std::string(id->get_string());
    if (const auto* len = m.if_contains("max_model_len"); len != nullptr && len->is_int64())
        info.max_model_len = len->get_int64();
    return info;
}

std::int64_t parse_props_context(std::string_view body) {
    boost::system::error_code ec;
    const auto v = json::parse(body, ec);
    if (ec || !v.is_object()) return 0;
    const auto* gen = v.get_object().if_contains("default_generation_settings");
    const auto* n = (gen != nullptr && gen->is_object()) ? gen->get_object().if_contains("n_ctx") : nullptr;
    return (n != nullptr && n->is_int64() && n->get_int64() > 0) ? n->get_int64() : 0;
}

result<server_info> fetch_server_info(const endpoint& ep, std::chrono::milliseconds timeout) {
    auto r = http_call(ep, false, "/v1/models", "", timeout);
    if (!r) return r.error();
    if (r->status != 200) return make_error(status::io_error, "/v1/models: HTTP " + std::to_string(r->status));
    auto info = parse_models(r->body);
    if (!info || info->max_model_len > 0) return info;
    // llama-server states its per-slot context only in /props; other servers 404 here.
    if (auto props = http_call(ep, false, "/props", "", timeout); props && props->status == 200)
        info->max_model_len = parse_props_context(props->body);
    return info;
}

namespace {

result<std::int64_t> token_of(const json::value& t) {
    if (t.is_int64()) return t.get_int64();
    if (t.is_object())
        if (const auto* id = t.get_object().if_contains("id"); id != nullptr && id->is_int64()) return id->get_int64();
    return make_error(status::parse_error, "/tokenize: token is neither an id nor {\"id\": ...}");
}

}  // namespace

result<std::vector<std::int64_t>> tokenize_remote(const endpoint& ep, const std::string& text,
                                                  std::chrono::milliseconds timeout) {
    // One body every server reads: calserve and vLLM take `prompt`, llama-server `content`.
    json::object body{{"prompt", text}, {"content", text}, {"add_special", false}, {"add_special_tokens", false}};
    auto r = http_call(ep, true, "/tokenize", json_text(body), timeout);
    if (!r) return r.error();
    if (r->status != 200) return make_error(status::io_error, "/tokenize: HTTP " + std::to_string(r->status));
    boost::system::error_code ec;
    const auto v = json::parse(r->body, ec);
    const auto* toks = (!ec && v.is_object()) ? v.get_object().if_contains("tokens") : nullptr;
    if (toks == nullptr || !toks->is_array()) return make_error(status::parse_error, "/tokenize: no tokens array");
    std::vector<std::int64_t> ids;
    ids.reserve(toks->get_array().size());
    for (const auto& t : toks->get_array()) {
        auto id = token_of(t);
        if (!id) return id.error();
        ids.push_back(*id);
    }
    return ids;
}

namespace {

std::string completion_body(const stream_request& req) {
    json::array prompt;
    for (auto id : req.prompt) prompt.push_back(id);
    json::object body{{"model", req.model},
                      {"prompt", std::move(prompt)},
                      {"max_tokens", req.max_tokens},
                      {"stream", true},
                      {"ignore_eos", true},
                      {"temperature", req.temperature},
                      {"stream_options", json::object{{"include_usage", true}}}};
    if (!req.response_format.empty()) body["response_format"] = json::parse(req.response_format);
    if (req.temperature > 0.0) body["seed"] = req.seed;
    return json_text(body);
}

void on_event(std::string_view data, bench_clock::time_point origin, request_record& rec, std::int64_t& events) {
    const auto c = parse_stream_chunk(data);
    if (c.done) {
        rec.saw_done = true;
        return;
    }
    if (c.malformed || c.has_error) {
        rec.error = c.malformed ? "malformed stream event" : "stream error: " + c.error;
        return;
    }
    if (rec.request_id.empty()) rec.request_id = c.id;
    if (!c.finish_reason.empty()) rec.finish_reason = c.finish_reason;
    if (c.usage_completion_tokens >= 0) {
        rec.completion_tokens = c.usage_completion_tokens;
        rec.usage_completion = true;
    }
    if (c.usage_prompt_tokens >= 0) rec.server_prompt_tokens = c.usage_prompt_tokens;
    if (c.usage_cached_tokens >= 0) rec.cached_tokens = c.usage_cached_tokens;
    if (c.text_events > 0) {
        const double t = seconds_since(origin);
        if (rec.t_first_token < 0) rec.t_first_token = t;
        for (std::int64_t i = 0; i < c.text_events; ++i) rec.token_times.push_back(t);
        events += c.text_events;
    }
}

// Reads the chunked body piece by piece so each event gets its own arrival time.
void read_stream(beast::tcp_stream& stream, beast::flat_buffer& buf, http::response_parser<http::buffer_body>& p,
                 bench_clock::time_point origin, request_record& rec) {
    sse_parser sse;
    std::int64_t events = 0;
    char chunk[16384];
    boost::system::error_code ec;
    while (!p.is_done()) {
        p.get().body().data = chunk;
        p.get().body().size = sizeof chunk;
        // read_some returns as soon as parsed body bytes are available (read() would
        // wait for the whole buffer and batch tokens, hiding inter-token latency).
        http::read_some(stream, buf, p, ec);
        if (ec == http::error::need_buffer) ec = {};
        if (ec) {
            rec.error = "read: " + ec.message();
            return;
        }
        const auto n = sizeof chunk - p.get().body().size;
        sse.feed(std::string_view(chunk, n), [&](std::string_view d) { on_event(d, origin, rec, events); });
    }
    rec.t_done = seconds_since(origin);
    if (rec.completion_tokens == 0) rec.completion_tokens = events;
    // A stream may end without [DONE] (older llama-server) once a choice has finished.
    if (!rec.saw_done && rec.finish_reason.empty() && rec.error.empty())
        rec.error = "stream ended without [DONE] or finish_reason";
    // The prompt was cut to an exact token count: the server must count the same.
    if (rec.error.empty() && rec.server_prompt_tokens >= 0 && rec.server_prompt_tokens != rec.prompt_tokens)
        rec.error = "server counted " + std::to_string(rec.server_prompt_tokens) + " prompt tokens, " +
                    std::to_string(rec.prompt_tokens) + " sent";
    rec.ok = rec.error.empty() && rec.t_first_token >= 0;
    if (rec.error.empty() && !rec.ok) rec.error = "no token received";
}

}  // namespace

void stream_completion(const endpoint& ep, const stream_request& req, bench_clock::time_point origin,
                       request_record& rec) {
    rec.prompt_tokens = static_cast<std::int64_t>(req.prompt.size());
    rec.max_tokens = req.max_tokens;
    asio::io_context ioc;
    beast::tcp_stream stream(ioc);
    stream.expires_after(req.timeout);
    const auto http_req = make_request(ep, true, "/v1/completions", completion_body(req));
    rec.t_send = seconds_since(origin);
    if (auto c = connect(stream, ioc, ep); !c) {
        rec.error = c.error().message;
        return;
    }
    boost::system::error_code ec;
    http::write(stream, http_req, ec);
    if (ec) {
        rec.error = "write: " + ec.message();
        return;
    }
    beast::flat_buffer buf;
    http::response_parser<http::buffer_body> p;
    p.body_limit(boost::none);
    http::read_header(stream, buf, p, ec);
    rec.t_first_byte = seconds_since(origin);
    if (ec) {
        rec.error = "read header: " + ec.message();
        return;
    }
    rec.http_status = static_cast<int>(p.get().result_int());
    if (auto it = p.get().find("X-Request-Id"); it != p.get().end()) rec.request_id = std::string(it->value());
    if (rec.http_status != 200) {
        rec.error = "HTTP " + std::to_string(rec.http_status);
        return;
    }
    read_stream(stream, buf, p, origin, rec);
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
}

}  // namespace calserve::loadgen
