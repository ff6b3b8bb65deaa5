#pragma once
//! Code-point classes -> byte DFAs over their UTF-8 encodings (grammar engine internals).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/grammar/compiled.hpp"

namespace calserve::model::grammar::detail {

inline constexpr std::uint32_t k_max_code_point = 0x10FFFF;

using code_ranges = std::vector<std::pair<std::uint32_t, std::uint32_t>>;  // inclusive

std::string encode_utf8(std::uint32_t cp);
/// Sorted, merged, optionally complemented over [0, 0x10FFFF], surrogates removed.
code_ranges normalize(code_ranges r, bool negate);
/// A DFA accepting exactly one UTF-8 character of the (normalized) set: transitions lead to
/// states, k_done (character complete) or k_dead. An empty set gives a DFA with no transition.
byte_dfa class_dfa(const code_ranges& ranges);

}  // namespace calserve::model::grammar::detail
