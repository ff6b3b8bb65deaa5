#pragma once
//! From a parsed request to the engine's `output_constraint`: the grammar that
//! `response_format` and `tool_choice` (required / named) ask for, compiled through
//! the engine's bounded cache on the tokenize pool, so a bad schema is a 400 naming
//! its path before any device work. docs/api.md, "Structured outputs and tools".
//!
//! Forced tool calls follow the Qwen3 template's instructions byte for byte:
//!   <tool_call>\n{"name": "<fn>", "arguments": <args>}\n</tool_call>
//! (required: one or more, separated by "\n"; named: exactly one), the arguments
//! by the function's parameters schema (any JSON object without one). With
//! thinking on, the grammar starts after </think>.
#include <optional>
#include <string>
#include <string_view>

#include "config/result.hpp"
#include "net/api_params.hpp"

namespace calserve::net {

// Fills `r.gen.constraint`; nothing for an unconstrained request.
std::optional<api_error> prepare_constraint(api_request& r, const actors::engine& engine);

// The EBNF of the forced tool calls (exposed for tests).
result<std::string> tool_call_ebnf(const api_output_spec& spec);

// Renames every rule of an EBNF text (definitions and references) to prefix + name,
// so several generated grammars can live in one.
std::string prefix_rules(std::string_view ebnf, std::string_view prefix);

}  // namespace calserve::net
