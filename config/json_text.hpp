#pragma once
//! The one JSON writer of the project's outputs (HTTP and WebSocket bodies, the
//! control socket, traces, timing logs, state files).
//!
//! Why not boost::json::serialize: it prints every double in exponent form
//! (`2.56E2`, `-3.57E0`), which typed decoders that expect an integer (Go's `int`)
//! reject and which no other server prints. Here a double is written in the
//! shortest form that reads back to the same bits (std::to_chars), fixed notation
//! for magnitudes in [1e-5, 1e16) and exponent form only outside it; a double that
//! holds an integer in that range is written without a fraction (`256`), so counts
//! read as integers. NaN and infinities, which JSON cannot express, are `null`.
//! Strings, keys, integers and structure are written by Boost.JSON itself.
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <string>

namespace calserve {

// `v` as compact JSON text (the object and array overloads spare a copy into a value).
std::string json_text(const boost::json::value& v);
std::string json_text(const boost::json::object& o);
std::string json_text(const boost::json::array& a);
// Appends `v` as JSON text to `out`.
void append_json(std::string& out, const boost::json::value& v);
// Appends one double as described above.
void append_json_number(std::string& out, double d);

}  // namespace calserve
