#pragma once
//! The versioned calserve manifest (`calserve-manifest.json`, schema 1): the one
//! file a package carries for the service layer, so nothing is inferred from names.
//!
//! Role: `parse_manifest` turns the JSON text into a `package`; `write_manifest_json`
//! is its inverse (used by `calserve pack`). Grammar: docs/package-format.md.
//! Fault model: malformed JSON, a missing field or a value of the wrong type is a
//! `package_invalid` error naming the JSON path; the structural invariants listed
//! in package.hpp are checked here so that a returned package never violates them.
#include <string>
#include <string_view>

#include "model/package/package.hpp"

namespace calserve::model::package {

result<package> parse_manifest(std::string_view json_text, const std::filesystem::path& root);
std::string write_manifest_json(const package& p);
// Checks the invariants listed in package.hpp; the message names the first violation.
void_result check_package_invariants(const package& p);

}  // namespace calserve::model::package
