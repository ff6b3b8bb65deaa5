#include "net/origin_policy.hpp"

#include <algorithm>
#include <boost/algorithm/string/case_conv.hpp>
#include <boost/algorithm/string/predicate.hpp>
#include <boost/algorithm/string/split.hpp>
#include <boost/algorithm/string/trim.hpp>
#include <charconv>

namespace calserve::net {

namespace {
struct origin_parts {
    std::string scheme;
    std::string host;   // lower case; IPv6 with its brackets
    std::uint16_t port = 0;
};

// An Origin header is `scheme "://" host [ ":" port ]` (RFC 6454 serialization);
// anything else ("null", paths, user info) is not an origin we could match.
std::optional<origin_parts> split_origin(std::string_view o) {
    const auto sep = o.find("://");
    if (sep == std::string_view::npos) return std::nullopt;
    origin_parts p;
    p.scheme = boost::algorithm::to_lower_copy(std::string(o.substr(0, sep)));
    if (p.scheme != "http" && p.scheme != "https") return std::nullopt;
    std::string_view rest = o.substr(sep + 3);
    if (rest.empty() || rest.find_first_of("/?#@") != std::string_view::npos) return std::nullopt;
    const auto close = rest.rfind(']');
    const auto colon = rest.rfind(':');
    std::string_view port;
    if (colon != std::string_view::npos && (close == std::string_view::npos || colon > close)) {
        port = rest.substr(colon + 1);
        rest = rest.substr(0, colon);
    }
    p.host = boost::algorithm::to_lower_copy(std::string(rest));
    if (p.host.empty()) return std::nullopt;
    if (port.empty()) {
        p.port = p.scheme == "https" ? 443 : 80;
        return p;
    }
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p.port);
    if (ec != std::errc{} || end != port.data() + port.size()) return std::nullopt;
    return p;
}

bool wildcard_host(std::string_view h) { return h.empty() || h == "0.0.0.0" || h == "::" || h == "[::]"; }

bool own_host(const origin_policy& p, std::string_view h) {
    if (h == "localhost" || h == "127.0.0.1" || h == "[::1]") return true;
    if (wildcard_host(p.host)) return false;
    const std::string host = boost::algorithm::to_lower_copy(p.host);
    return h == host || (host.find(':') != std::string::npos && h == "[" + host + "]");
}
}  // namespace

origin_policy make_origin_policy(std::string host, std::uint16_t port, std::string_view allowed_origins) {
    origin_policy p{std::move(host), port, {}, false};
    std::vector<std::string> items;
    const std::string list(allowed_origins);
    boost::algorithm::split(items, list, [](char c) { return c == ','; });
    for (auto& item : items) {
        boost::algorithm::trim(item);
        while (!item.empty() && item.back() == '/') item.pop_back();  // "http://a:1/" as typed in a browser bar
        if (item == "*") p.any = true;
        else if (!item.empty()) p.allowed.push_back(boost::algorithm::to_lower_copy(item));
    }
    return p;
}

origin_verdict check_origin(const origin_policy& p, std::optional<std::string_view> origin) {
    if (!origin) return origin_verdict::absent;
    if (p.any) return origin_verdict::listed;
    auto parts = split_origin(*origin);
    if (parts && parts->port == p.port && own_host(p, parts->host)) return origin_verdict::own;
    const std::string lower = boost::algorithm::to_lower_copy(std::string(*origin));
    if (std::find(p.allowed.begin(), p.allowed.end(), lower) != p.allowed.end()) return origin_verdict::listed;
    return origin_verdict::refused;
}

bool body_type_accepted(std::optional<std::string_view> content_type, bool has_origin) {
    if (!content_type) return true;
    std::string media(content_type->substr(0, content_type->find(';')));
    boost::algorithm::trim(media);
    boost::algorithm::to_lower(media);
    if (media == "application/json") return true;
    return media == "application/x-www-form-urlencoded" && !has_origin;
}

}  // namespace calserve::net
