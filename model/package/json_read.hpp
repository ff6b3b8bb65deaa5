#pragma once
//! Checked field access over Boost.JSON values for the package readers.
//!
//! Role: turn "field missing / wrong type / out of range" into one message naming
//! the JSON path, so loaders can stop at the first defect without exceptions.
//! Fault model: every accessor returns std::nullopt and records the first error in
//! the `json_reader`; later calls still run (cheaply) so callers may check once.
//! Invariant: `ok()` is false iff at least one accessor failed.
#include <boost/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace calserve::model::package {

class json_reader {
public:
    bool ok() const { return error_.empty(); }
    const std::string& error() const { return error_; }
    void fail(std::string message) {
        if (error_.empty()) error_ = std::move(message);
    }

    const boost::json::object* object(const boost::json::value& v, std::string_view path);
    const boost::json::object* object(const boost::json::object& o, std::string_view key, std::string_view path);
    const boost::json::array* array(const boost::json::object& o, std::string_view key, std::string_view path);
    std::optional<std::string> string(const boost::json::object& o, std::string_view key, std::string_view path);
    std::optional<std::uint64_t> u64(const boost::json::object& o, std::string_view key, std::string_view path);
    std::optional<std::int64_t> i64(const boost::json::value& v, std::string_view path);
    // Accepts an integer or a "0x..." string (device addresses are written in hex).
    std::optional<std::uint64_t> address(const boost::json::object& o, std::string_view key, std::string_view path);
    std::optional<bool> boolean(const boost::json::object& o, std::string_view key, std::string_view path);

private:
    std::string error_;
};

// Parses "0x1f"/"31" into an unsigned value; nullopt on anything else.
std::optional<std::uint64_t> parse_unsigned(std::string_view text);
std::string to_hex(std::uint64_t v);

}  // namespace calserve::model::package
