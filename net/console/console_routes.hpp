#pragma once
//! The web console's routes (net/routes.cpp lists them in THE route table):
//!   GET /                    the page (open: static, holds no data; it asks for the key)
//!   GET /console/<file>      its script and style sheet (open, static)
//!   GET /v1/console/state    the engine view's snapshot (key; console_state.hpp)
//! With server.console off every one of them answers 404.
#include "net/request_path.hpp"

namespace calserve::net {

route_reply console_file(http_server::impl& srv, const http_request& req);
route_reply console_state_reply(http_server::impl& srv, const http_request& req);

// server.console: "true", "false", or "auto" (on when `host` is a loopback address).
bool console_enabled(std::string_view setting, std::string_view host);

// The API key a WebSocket handshake offers as the subprotocol "calserve.key.<hex of
// its UTF-8 bytes>" (browsers cannot set Authorization on a WebSocket), or nullopt.
std::optional<std::string> ws_protocol_key(const http_request& req);
// Whether the handshake offers the subprotocol "calserve" (then the answer names it).
bool ws_offers_calserve(const http_request& req);

}  // namespace calserve::net
