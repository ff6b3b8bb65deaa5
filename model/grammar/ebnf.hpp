#pragma once
//! The EBNF reader's output before flattening (grammar engine internals).
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "config/result.hpp"
#include "model/grammar/compiled.hpp"

namespace calserve::model::grammar::detail {

struct ir_item {
    enum kind_t : std::uint8_t { lit, cls, ref } kind = lit;
    std::string bytes;       // lit
    std::uint32_t index = 0;  // cls: dfa; ref: rule
};
using ir_seq = std::vector<ir_item>;

struct ir_rule {
    std::string name;
    std::vector<ir_seq> alts;
    bool defined = false;
    std::size_t at = 0;  // offset of the definition (or first use) in the text
    chain_link link;     // set on the rules a repetition x{m,n} generates
};

struct ir_grammar {
    std::vector<ir_rule> rules;
    std::map<std::string, std::uint32_t> index;
    std::vector<byte_dfa> dfas;
    std::string text;
};

/// "line:col" of a byte offset.
std::string position(std::string_view text, std::size_t at);
result<ir_grammar> read_ebnf(std::string_view text);

}  // namespace calserve::model::grammar::detail
