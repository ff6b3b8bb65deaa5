// Client calls of the real-daemon soak (see real_soak_client.hpp).
#include "soak/real_soak_client.hpp"
#include "config/json_text.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <sys/socket.h>
#include <sys/time.h>
#include <thread>

#include "loadgen/sse.hpp"

namespace calserve::soak {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;

namespace {

// Beast's synchronous calls ignore tcp_stream deadlines; kernel timeouts bound them instead.
void set_io_timeout(tcp::socket& s, std::chrono::milliseconds t) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(t.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
    ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

result<void> open(tcp::socket& s, asio::io_context& ioc, const loadgen::endpoint& ep,
                  std::chrono::milliseconds io_timeout) {
    boost::system::error_code ec;
    tcp::resolver resolver(ioc);
    const auto hits = resolver.resolve(ep.host, ep.port, ec);
    if (ec) return make_error(status::io_error, "resolve " + ep.host + ": " + ec.message());
    asio::connect(s, hits, ec);
    if (ec) return make_error(status::io_error, "connect: " + ec.message());
    set_io_timeout(s, io_timeout);
    return {};
}

http::request<http::string_body> make_request(const loadgen::endpoint& ep, http::verb verb,
                                              const std::string& path, std::string body) {
    http::request<http::string_body> req{verb, ep.base + path, 11};
    req.set(http::field::host, ep.host);
    req.set(http::field::user_agent, "calserve-soak");
    if (verb == http::verb::post) req.set(http::field::content_type, "application/json");
    if (!ep.api_key.empty()) req.set(http::field::authorization, "Bearer " + ep.api_key);
    req.keep_alive(false);
    req.body() = std::move(body);
    req.prepare_payload();
    return req;
}

std::string request_body(const soak_request& r) {
    json::array prompt;
    for (auto id : r.prompt) prompt.push_back(id);
    json::object b{{"model", r.model}, {"prompt", std::move(prompt)}, {"max_tokens", r.max_tokens},
                   {"stream", r.stream}, {"temperature", r.temperature}};
    if (r.temperature > 0) {
        b["top_p"] = r.top_p;
        b["seed"] = r.seed;
    }
    if (r.timeout_ms > 0) b["timeout_ms"] = r.timeout_ms;
    return json_text(b);
}

// The `code` of an `{"error": {...}}` object (a body or a stream event), empty if none.
std::string error_code_of(std::string_view text) {
    boost::system::error_code ec;
    auto v = json::parse(text, ec);
    if (ec || !v.is_object()) return {};
    const auto* e = v.get_object().if_contains("error");
    if (e == nullptr || !e->is_object()) return {};
    const auto* c = e->get_object().if_contains("code");
    return c != nullptr && c->is_string() ? std::string(c->get_string()) : "unknown";
}

bool finished_body(std::string_view text) {
    boost::system::error_code ec;
    auto v = json::parse(text, ec);
    if (ec || !v.is_object()) return false;
    const auto* ch = v.get_object().if_contains("choices");
    if (ch == nullptr || !ch->is_array() || ch->get_array().empty() || !ch->get_array()[0].is_object()) return false;
    const auto* fr = ch->get_array()[0].get_object().if_contains("finish_reason");
    return fr != nullptr && fr->is_string() && (fr->get_string() == "stop" || fr->get_string() == "length");
}

void read_stream(tcp::socket& s, beast::flat_buffer& buf, http::response_parser<http::buffer_body>& p,
                 const soak_request& req, request_end& end) {
    loadgen::sse_parser sse;
    bool done = false, finish = false;
    char chunk[4096];
    boost::system::error_code ec;
    auto on_event = [&](std::string_view data) {
        const auto c = loadgen::parse_stream_chunk(data);
        if (c.done) done = true;
        else if (c.has_error) end.seen.error_code = error_code_of(data);
        else if (c.malformed) end.detail = "malformed stream event";
        else {
            end.token_events += c.text_events;
            if (c.finish_reason == "stop" || c.finish_reason == "length") finish = true;
        }
    };
    while (!p.is_done()) {
        if (req.disconnect_after >= 0 && end.token_events >= req.disconnect_after) {
            s.close(ec);  // the request must be cancelled by the daemon; its KV released
            end.seen.closed_by_client = true;
            return;
        }
        if (req.read_pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(req.read_pause_ms));
        p.get().body().data = chunk;
        p.get().body().size = sizeof chunk;
        http::read_some(s, buf, p, ec);
        if (ec == http::error::need_buffer) ec = {};
        if (ec) {
            end.detail = "stream read: " + ec.message();
            return;
        }
        sse.feed(std::string_view(chunk, sizeof chunk - p.get().body().size), on_event);
    }
    if (!done && end.detail.empty()) end.detail = "stream ended without [DONE]";
    end.seen.finished = done && finish && end.detail.empty();
}

}  // namespace

request_end perform_request(const loadgen::endpoint& ep, const soak_request& req,
                            std::chrono::milliseconds io_timeout) {
    request_end end;
    end.seen.set_deadline = req.timeout_ms > 0;
    asio::io_context ioc;
    tcp::socket s(ioc);
    if (auto o = open(s, ioc, ep, io_timeout); !o) {
        end.detail = o.error().message;
        return end;
    }
    boost::system::error_code ec;
    http::write(s, make_request(ep, http::verb::post, "/v1/completions", request_body(req)), ec);
    if (ec) {
        end.detail = "write: " + ec.message();
        return end;
    }
    beast::flat_buffer buf;
    if (req.stream) {
        http::response_parser<http::buffer_body> p;
        p.body_limit(boost::none);
        http::read_header(s, buf, p, ec);
        if (ec) {
            end.detail = "read header: " + ec.message();
            return end;
        }
        end.seen.http_status = static_cast<int>(p.get().result_int());
        end.request_id = std::string(p.get()["X-Request-Id"]);
        if (end.seen.http_status == 200) {
            read_stream(s, buf, p, req, end);
            s.close(ec);
            return end;
        }
        // An error before the stream started: a plain JSON body follows.
        http::response_parser<http::string_body> rest(std::move(p));
        http::read(s, buf, rest, ec);
        end.seen.error_code = error_code_of(rest.get().body());
        if (ec) end.detail = "read body: " + ec.message();
        return end;
    }
    http::response_parser<http::string_body> p;
    p.body_limit(64 * 1024 * 1024);
    http::read(s, buf, p, ec);
    if (ec) {
        end.detail = "read: " + ec.message();
        return end;
    }
    end.seen.http_status = static_cast<int>(p.get().result_int());
    end.request_id = std::string(p.get()["X-Request-Id"]);
    if (end.seen.http_status == 200) end.seen.finished = finished_body(p.get().body());
    else end.seen.error_code = error_code_of(p.get().body());
    if (end.seen.http_status == 200 && !end.seen.finished) end.detail = "200 without finish_reason";
    s.close(ec);
    return end;
}

result<std::string> fetch_text(const loadgen::endpoint& ep, const std::string& path,
                               std::chrono::milliseconds io_timeout) {
    asio::io_context ioc;
    tcp::socket s(ioc);
    if (auto o = open(s, ioc, ep, io_timeout); !o) return o.error();
    boost::system::error_code ec;
    http::write(s, make_request(ep, http::verb::get, path, {}), ec);
    if (ec) return make_error(status::io_error, "write " + path + ": " + ec.message());
    beast::flat_buffer buf;
    http::response_parser<http::string_body> p;
    p.body_limit(64 * 1024 * 1024);
    http::read(s, buf, p, ec);
    if (ec) return make_error(status::io_error, "read " + path + ": " + ec.message());
    if (p.get().result_int() != 200) {
        return make_error(status::io_error, path + ": HTTP " + std::to_string(p.get().result_int()));
    }
    s.close(ec);
    return std::move(p.get().body());
}

std::string error_key(const request_end& e) {
    if (e.seen.http_status == 0) return "transport: " + e.detail;
    std::string key = (e.seen.http_status == 200 ? "stream 200 " : "HTTP " + std::to_string(e.seen.http_status) + " ");
    if (!e.seen.error_code.empty()) return key + e.seen.error_code;
    return key + (e.detail.empty() ? "no finish_reason" : e.detail);
}

std::size_t flood_connections(const loadgen::endpoint& ep, std::size_t count, std::chrono::milliseconds hold,
                              const std::function<void()>& during) {
    asio::io_context ioc;
    std::vector<tcp::socket> held;
    for (std::size_t i = 0; i < count; ++i) {
        tcp::socket s(ioc);
        if (open(s, ioc, ep, std::chrono::milliseconds(5000))) held.push_back(std::move(s));
    }
    during();
    std::this_thread::sleep_for(hold);
    for (auto& s : held) {
        boost::system::error_code ignored;
        s.close(ignored);
    }
    return held.size();
}

bool never_reading_stream(const loadgen::endpoint& ep, const soak_request& req, std::chrono::milliseconds hold,
                          const std::function<void()>& during) {
    asio::io_context ioc;
    tcp::socket s(ioc);
    if (!open(s, ioc, ep, std::chrono::milliseconds(5000))) return false;
    // A small receive buffer so the daemon's writes meet a full socket sooner.
    int small = 4096;
    ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    boost::system::error_code ec;
    http::write(s, make_request(ep, http::verb::post, "/v1/completions", request_body(req)), ec);
    if (ec) return false;
    during();
    std::this_thread::sleep_for(hold);
    s.close(ec);
    return true;
}

}  // namespace calserve::soak
