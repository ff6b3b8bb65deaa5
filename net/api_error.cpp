// Status -> HTTP mapping and OpenAI error bodies. See api_error.hpp.
#include "net/api_error.hpp"

#include <boost/json.hpp>

#include "config/json_text.hpp"

namespace calserve::net {

http_mapping map_status(status s) {
    switch (s) {
        case status::ok: return {200, "ok", false};
        case status::unauthorized: return {401, "authentication_error", false};
        case status::not_found: return {404, "not_found_error", false};
        case status::payload_too_large: return {413, "invalid_request_error", false};
        case status::deadline_exceeded: return {504, "timeout_error", false};
        case status::cancelled: return {499, "cancelled", false};
        case status::unsupported: return {400, "invalid_request_error", false};
        case status::not_ready:
        case status::device_dead: return {503, "service_unavailable_error", true};
        default: break;
    }
    switch (fault_class_of(s)) {
        case fault_class::request: return {400, "invalid_request_error", false};
        case fault_class::capacity: return {429, "rate_limit_error", true};
        case fault_class::retryable: return {503, "service_unavailable_error", true};
        case fault_class::device: return {503, "service_unavailable_error", true};
        case fault_class::model:
        case fault_class::internal:
        case fault_class::none: break;
    }
    return {500, "server_error", false};
}

unsigned http_status_of(const api_error& e) { return e.http_status != 0 ? e.http_status : map_status(e.code).http_status; }

api_error field_error(std::string_view field, std::string_view what, status code) {
    std::string msg(field);
    if (!msg.empty()) msg += ": ";
    msg += what;
    return api_error{code, std::string(field), std::move(msg)};
}

api_error from_error_info(const error_info& e) {
    std::string msg = e.message.empty() ? std::string(describe(e.code)) : e.message;
    return api_error{e.code, {}, std::move(msg)};
}

std::string error_json(const api_error& e) {
    boost::json::object inner;
    inner["message"] = e.message;
    inner["type"] = map_status(e.code).type;
    if (e.param.empty()) inner["param"] = nullptr;
    else inner["param"] = e.param;
    inner["code"] = to_string(e.code);
    boost::json::object outer;
    outer["error"] = std::move(inner);
    return json_text(outer);
}

}  // namespace calserve::net
