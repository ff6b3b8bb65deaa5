#pragma once
//! API errors at the edge: the ONE mapping from `calserve::status` to an HTTP
//! status code and an OpenAI error type, and the error body in OpenAI's shape
//! `{"error": {"message", "type", "param", "code"}}`.
//!
//! Invariant: every status of the table maps to exactly one HTTP code here;
//! nothing else in net/ picks an HTTP code for a failure. Validation failures
//! carry the offending field in `param` and at the head of `message`.
#include <string>
#include <string_view>

#include "config/result.hpp"

namespace calserve::net {

struct http_mapping {
    unsigned http_status;      // 400, 401, 404, 413, 429, 500, 503, 504, ...
    std::string_view type;     // OpenAI error type
    bool retry_after;          // the response carries Retry-After
};

// The one status -> HTTP mapping (also used for WebSocket error events).
http_mapping map_status(status s);

// A failure at the API edge: the status, the field it concerns (may be empty) and a message.
struct api_error {
    status code = status::invalid_argument;
    std::string param;
    std::string message;
    // 0 = map_status(code). Set only by the HTTP layer for protocol refusals the status
    // table has no code of its own for (426 Upgrade Required, 431 header too large).
    unsigned http_status = 0;
};

// The HTTP status an error is answered with.
unsigned http_status_of(const api_error& e);

api_error field_error(std::string_view field, std::string_view what, status code = status::invalid_argument);
api_error from_error_info(const error_info& e);

// `{"error":{"message":...,"type":...,"param":...,"code":...}}`
std::string error_json(const api_error& e);

}  // namespace calserve::net
