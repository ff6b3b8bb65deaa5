#pragma once
//! One status table for the whole daemon (X-macro: name, number, fault class, text).
//! It generates the `status` enum, `to_string`, `describe` and `fault_class_of`.
//! Device codes map 1:1 into it; `net/` maps a status to an HTTP/WebSocket code in one place.
//!
//! Fault classes say who pays for a failure:
//!   retryable - try again after a short backoff (bounded);
//!   request   - only the request that caused it fails;
//!   capacity  - queue or push back (429), nothing is broken;
//!   model     - the package/model is unusable (configure, shapes, names);
//!   device    - the device must be reset; in-flight sequences are re-prefilled.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace calserve {

enum class fault_class : std::uint8_t { none, retryable, request, capacity, model, device, internal };

#define CALSERVE_STATUS_TABLE(X)                                                                   \
    X(ok, 0, none, "ok")                                                                           \
    X(invalid_argument, 100, request, "invalid argument")                                          \
    X(bad_csr, 101, request, "CSR register value out of range")                                    \
    X(slice_out_of_range, 102, request, "input slice exceeds the buffer shape")                     \
    X(missing_tensor, 103, request, "a required input tensor was not written")                      \
    X(context_overflow, 104, request, "prompt and max_tokens exceed the usable context")           \
    X(unknown_sequence, 105, request, "unknown KV sequence id")                                    \
    X(cancelled, 106, request, "cancelled")                                                        \
    X(deadline_exceeded, 107, request, "deadline passed")                                          \
    X(parse_error, 108, request, "malformed input")                                                \
    X(not_found, 109, request, "not found")                                                        \
    X(unauthorized, 110, request, "missing or wrong API key")                                      \
    X(payload_too_large, 111, request, "request body too large")                                   \
    X(sequence_exists, 112, request, "KV sequence id already allocated")                           \
    X(submit_busy, 200, retryable, "device queue busy; retry")                                     \
    X(mailbox_full, 201, retryable, "actor mailbox full")                                          \
    X(kv_full, 300, capacity, "KV cache has no room for the sequence")                             \
    X(overloaded, 301, capacity, "server overloaded")                                              \
    X(queue_full, 302, capacity, "request queue full")                                             \
    X(out_of_device_memory, 303, capacity, "package does not fit device memory")                   \
    X(package_invalid, 400, model, "package invalid")                                              \
    X(configure_failed, 401, model, "configure failed")                                            \
    X(submodel_not_found, 402, model, "submodel not found")                                        \
    X(shape_mismatch, 403, model, "tensor shape does not match the package")                       \
    X(dtype_mismatch, 404, model, "tensor dtype does not match the package")                       \
    X(unsupported, 405, model, "unsupported by this package or backend")                           \
    X(not_configured, 406, model, "device not configured")                                         \
    X(wait_timeout, 500, device, "device wait timed out")                                          \
    X(ccu_exception, 501, device, "CCU exception on the device")                                   \
    X(device_lost, 502, device, "device lost")                                                     \
    X(h2d_error, 503, device, "host-to-device copy failed")                                        \
    X(d2h_error, 504, device, "device-to-host copy failed")                                        \
    X(logits_nan, 505, device, "device returned NaN/Inf logits")                                   \
    X(reset_failed, 506, device, "device reset failed")                                            \
    X(submit_error, 507, device, "device rejected the submission")                                 \
    X(not_ready, 508, device, "device not ready")                                                  \
    X(device_dead, 509, device, "device dead after failed resets")                                 \
    X(job_retries_exhausted, 510, device, "the request's device jobs failed too many times in a row")   \
    X(internal, 900, internal, "internal error")                                                   \
    X(io_error, 901, internal, "I/O error")

enum class status : std::uint16_t {
#define CALSERVE_STATUS_ENUM(name, number, cls, text) name = number,
    CALSERVE_STATUS_TABLE(CALSERVE_STATUS_ENUM)
#undef CALSERVE_STATUS_ENUM
};

constexpr std::string_view to_string(status s) {
    switch (s) {
#define CALSERVE_STATUS_NAME(name, number, cls, text) \
    case status::name: return #name;
        CALSERVE_STATUS_TABLE(CALSERVE_STATUS_NAME)
#undef CALSERVE_STATUS_NAME
    }
    return "unknown";
}

// The classes a failure can have (all but `none`), in enum order.
inline constexpr fault_class failure_classes[] = {fault_class::retryable, fault_class::request, fault_class::capacity,
                                                  fault_class::model,     fault_class::device,  fault_class::internal};
static_assert(std::size(failure_classes) == static_cast<std::size_t>(fault_class::internal));

constexpr std::string_view describe(status s) {
    switch (s) {
#define CALSERVE_STATUS_TEXT(name, number, cls, text) \
    case status::name: return text;
        CALSERVE_STATUS_TABLE(CALSERVE_STATUS_TEXT)
#undef CALSERVE_STATUS_TEXT
    }
    return "unknown status";
}

constexpr fault_class fault_class_of(status s) {
    switch (s) {
#define CALSERVE_STATUS_CLASS(name, number, cls, text) \
    case status::name: return fault_class::cls;
        CALSERVE_STATUS_TABLE(CALSERVE_STATUS_CLASS)
#undef CALSERVE_STATUS_CLASS
    }
    return fault_class::internal;
}

constexpr std::string_view to_string(fault_class c) {
    switch (c) {
        case fault_class::none: return "none";
        case fault_class::retryable: return "retryable";
        case fault_class::request: return "request";
        case fault_class::capacity: return "capacity";
        case fault_class::model: return "model";
        case fault_class::device: return "device";
        case fault_class::internal: return "internal";
    }
    return "unknown";
}

// Every status in table order, for tests and docs generation.
inline constexpr status all_statuses[] = {
#define CALSERVE_STATUS_LIST(name, number, cls, text) status::name,
    CALSERVE_STATUS_TABLE(CALSERVE_STATUS_LIST)
#undef CALSERVE_STATUS_LIST
};

}  // namespace calserve
