#include "net/console/console_routes.hpp"

#include <boost/algorithm/hex.hpp>
#include <boost/asio/ip/address.hpp>
#include <charconv>

#include "net/console/console_assets.hpp"

namespace calserve::net {

namespace {
constexpr std::string_view k_protocol = "calserve";
constexpr std::string_view k_key_prefix = "calserve.key.";

route_reply not_found(std::string_view path) {
    return route_reply{404, error_json(api_error{status::not_found, {}, "no route " + std::string(path)})};
}

std::string_view path_of(const http_request& req) {
    std::string_view target = req.target();
    return target.substr(0, target.find('?'));
}

// The value of `name` in the query string, or "".
std::string_view query_value(const http_request& req, std::string_view name) {
    std::string_view target = req.target();
    const auto q = target.find('?');
    if (q == std::string_view::npos) return {};
    std::string_view rest = target.substr(q + 1);
    while (!rest.empty()) {
        const auto amp = rest.find('&');
        std::string_view pair = rest.substr(0, amp);
        if (pair.size() > name.size() && pair.substr(0, name.size()) == name && pair[name.size()] == '=')
            return pair.substr(name.size() + 1);
        if (amp == std::string_view::npos) break;
        rest = rest.substr(amp + 1);
    }
    return {};
}

// The comma-separated subprotocols the handshake offers, trimmed.
std::vector<std::string_view> offered_protocols(const http_request& req) {
    std::vector<std::string_view> out;
    std::string_view v = req[http::field::sec_websocket_protocol];
    while (!v.empty()) {
        const auto comma = v.find(',');
        std::string_view p = v.substr(0, comma);
        const auto b = p.find_first_not_of(" \t");
        const auto e = p.find_last_not_of(" \t");
        if (b != std::string_view::npos) out.push_back(p.substr(b, e - b + 1));
        if (comma == std::string_view::npos) break;
        v = v.substr(comma + 1);
    }
    return out;
}
}  // namespace

bool console_enabled(std::string_view setting, std::string_view host) {
    if (setting == "true") return true;
    if (setting == "false") return false;
    if (host == "localhost") return true;
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(std::string(host), ec);
    return !ec && addr.is_loopback();
}

route_reply console_file(http_server::impl& srv, const http_request& req) {
    const auto path = path_of(req);
    if (!srv.options.console) return not_found(path);
    constexpr std::string_view k_dir = "/console/";
    std::string_view name = path == "/" ? std::string_view("index.html") : path.substr(k_dir.size());
    for (const auto& a : console_assets())
        if (a.name == name) return route_reply{200, std::string(a.bytes), a.content_type};
    return not_found(path);
}

route_reply console_state_reply(http_server::impl& srv, const http_request& req) {
    if (!srv.options.console || !srv.options.console_state) return not_found(path_of(req));
    std::uint64_t since = 0;
    const auto v = query_value(req, "since");
    if (!v.empty()) {
        auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), since);
        if (ec != std::errc{} || p != v.data() + v.size())
            return route_reply{400, error_json(field_error("since", "expected a job sequence number"))};
    }
    return route_reply{200, srv.options.console_state(since)};
}

std::optional<std::string> ws_protocol_key(const http_request& req) {
    for (auto p : offered_protocols(req)) {
        if (p.size() <= k_key_prefix.size() || p.substr(0, k_key_prefix.size()) != k_key_prefix) continue;
        std::string key;
        try {
            boost::algorithm::unhex(p.begin() + std::ptrdiff_t(k_key_prefix.size()), p.end(), std::back_inserter(key));
        } catch (const std::exception&) {
            return std::nullopt;  // not hex: no key offered
        }
        return key;
    }
    return std::nullopt;
}

bool ws_offers_calserve(const http_request& req) {
    for (auto p : offered_protocols(req))
        if (p == k_protocol) return true;
    return false;
}

}  // namespace calserve::net
