#pragma once
//! Which browser pages may drive the daemon, and which request bodies it reads.
//!
//! Why: a web page can POST to http://127.0.0.1:8080 from any site. With a
//! `text/plain` or form body the browser sends it without asking first (no CORS
//! preflight), and CORS never covers WebSockets, so without these checks any page a
//! user opens could run generations on a local daemon and read the WebSocket replies.
//! Ollama refuses foreign origins the same way and lets the operator list allowed ones.
//!
//! Rules (pure functions, table-tested in tests/net/origin_policy_test.cpp):
//! - No `Origin` header: not a browser page's request (curl, SDKs, a front): allowed.
//! - The daemon's own origin: `http(s)://H:P` where P is the bound port and H is
//!   `localhost`, `127.0.0.1`, `[::1]` or `server.host` (when it is not a wildcard
//!   address). Allowed: the console is served from it.
//! - An origin listed in `server.allowed_origins` (comma-separated, exact
//!   `scheme://host[:port]`; `*` allows every origin): allowed, with CORS headers and
//!   preflight answers. Anything else (`null` included): 403 on HTTP and on the
//!   WebSocket upgrade.
//! - A POST body must be declared JSON (`application/json`, parameters allowed) or be
//!   undeclared; `application/x-www-form-urlencoded` (what `curl -d` sends without
//!   `-H`) is read as JSON only when the request carries no `Origin`, so a browser form
//!   never is. Any other declared type: 415.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace calserve::net {

struct origin_policy {
    std::string host;                  // server.host
    std::uint16_t port = 0;            // the bound port
    std::vector<std::string> allowed;  // server.allowed_origins, split and trimmed
    bool any = false;                  // "*" was listed
};

// server.allowed_origins ("a, b" or "*") into the policy's list.
origin_policy make_origin_policy(std::string host, std::uint16_t port, std::string_view allowed_origins);

enum class origin_verdict : std::uint8_t {
    absent,   // no Origin header
    own,      // the daemon's own origin (or a loopback form of it)
    listed,   // in server.allowed_origins (or "*")
    refused,
};

origin_verdict check_origin(const origin_policy& p, std::optional<std::string_view> origin);

// Whether a POST body declared with `content_type` (nullopt: no header) is read,
// given whether the request carries an Origin.
bool body_type_accepted(std::optional<std::string_view> content_type, bool has_origin);

}  // namespace calserve::net
