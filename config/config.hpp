#pragma once
//! The daemon's configuration: one JSON file checked against one schema
//! (`schema.cpp`: path, type, default, range, allowed values, doc), then
//! `--set key.path=value` overrides. Anything unknown, mistyped or out of range
//! is rejected at start-up with the key path and what was expected; a loaded
//! `config` is therefore always complete and valid, and getters cannot fail
//! except on a programming error (a key missing from the schema).
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <boost/json/fwd.hpp>

#include "config/result.hpp"

namespace calserve {

enum class value_type : std::uint8_t { integer, number, boolean, string };
std::string_view to_string(value_type t);

struct key_spec {
    std::string_view path;          // dotted, e.g. "runtime.max_inflight"
    value_type type;
    std::string_view default_text;  // in --set syntax: 2, 0.5, true, info
    double min = 0;                 // numeric range (inclusive); ignored for bool/string
    double max = 0;
    std::string_view allowed;       // strings: "a|b|c" or empty for any
    std::string_view doc;
};

// The full schema, in documentation order. A `*` segment (models.*.chips) matches
// any one name: such keys have no default and are read with `find_string`.
std::span<const key_spec> config_schema();
const key_spec* find_key(std::string_view path);
bool key_matches(std::string_view pattern, std::string_view path);
bool is_pattern(const key_spec& k);

using config_value = std::variant<std::int64_t, double, bool, std::string>;

class config {
public:
    // Defaults only.
    static config defaults();
    // Defaults, then the file (if any), then each "key.path=value" override in order.
    static result<config> load(const std::optional<std::filesystem::path>& file,
                               const std::vector<std::string>& overrides = {});
    // Parses a JSON document (nested objects) over the current values.
    void_result merge_json(std::string_view json_text, std::string_view origin);
    // One "key.path=value" override.
    void_result set(std::string_view assignment);
    void_result set(std::string_view path, std::string_view value_text);

    std::int64_t integer(std::string_view path) const;
    double number(std::string_view path) const;
    bool boolean(std::string_view path) const;
    const std::string& string(std::string_view path) const;
    // A key that may be absent (pattern keys, e.g. models.NAME.chips).
    std::optional<std::string> find_string(std::string_view path) const;

    // Nested, pretty-printed JSON of every key (what --print-defaults shows).
    std::string to_json() const;

private:
    const config_value& at(std::string_view path) const;
    // merge_json's second half: a parsed document over the current values.
    void_result merge_document(const boost::json::value& doc, std::string_view origin);
    std::map<std::string, config_value, std::less<>> values_;
};

}  // namespace calserve
