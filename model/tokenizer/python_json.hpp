#pragma once
//! JSON text exactly as Python's `json.dumps(value, ensure_ascii=False)` writes it,
//! which is what the `tojson` filter of Hugging Face chat templates prints: ", "
//! and ": " separators, keys in their given order, non-ASCII kept raw, control
//! characters escaped, floats in Python's repr (1.0, 1e-05, 1.5e+20). The chat
//! template renders tool definitions with it, so a prompt matches the one the
//! model was trained on byte for byte.
#include <string>

#include <boost/json/value.hpp>

namespace calserve::model {
std::string python_json_dumps(const boost::json::value& v);
// Python's repr of a finite double.
std::string python_float_repr(double d);
}  // namespace calserve::model
