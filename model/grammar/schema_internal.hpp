#pragma once
//! Pieces of the JSON Schema -> EBNF conversion that are tested on their own.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "config/result.hpp"

namespace calserve::model::grammar::detail {

/// EBNF for the decimal integers in [lo, hi] (either bound may be absent), no leading zeros.
std::string integer_range_ebnf(std::optional<std::int64_t> lo, std::optional<std::int64_t> hi);
/// EBNF for the JSON string body (without the quotes) of the strings a regex matches
/// (anchored or not); a construct it cannot express exactly is invalid_argument.
result<std::string> pattern_to_ebnf(std::string_view pattern);

}  // namespace calserve::model::grammar::detail
