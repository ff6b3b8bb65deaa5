#pragma once
//! `result<T>`: a value or an `error` (status + human message). Returned by every
//! fallible call; no exception crosses an actor boundary.
#include <string>
#include <utility>
#include <variant>

#include "config/status.hpp"

namespace calserve {

struct error_info {
    status code = status::internal;
    std::string message;

    std::string what() const {
        std::string out{to_string(code)};
        if (!message.empty()) out += ": " + message;
        return out;
    }
};

inline error_info make_error(status code, std::string message = {}) { return error_info{code, std::move(message)}; }

template <class T>
class [[nodiscard]] result {
public:
    result(T value) : v_(std::move(value)) {}
    result(error_info e) : v_(std::move(e)) {}

    bool ok() const { return v_.index() == 0; }
    explicit operator bool() const { return ok(); }
    T& value() & { return std::get<0>(v_); }
    const T& value() const& { return std::get<0>(v_); }
    T&& value() && { return std::get<0>(std::move(v_)); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }
    const error_info& error() const { return std::get<1>(v_); }
    status code() const { return ok() ? status::ok : error().code; }

private:
    std::variant<T, error_info> v_;
};

template <>
class [[nodiscard]] result<void> {
public:
    result() = default;
    result(error_info e) : err_(std::move(e)), ok_(false) {}

    bool ok() const { return ok_; }
    explicit operator bool() const { return ok_; }
    const error_info& error() const { return err_; }
    status code() const { return ok_ ? status::ok : err_.code; }

private:
    error_info err_{status::ok, {}};
    bool ok_ = true;
};

using void_result = result<void>;

}  // namespace calserve
