#pragma once
//! Where every `calserve` subcommand finds its data, in one place: the tokenizer
//! files (tokenizer.json + tokenizer_config.json), the data home that holds the
//! packages and models the CLI writes itself (the default package of `serve`, the
//! soak models), and the data an installed binary carries beside it.
//!
//! Tokenizer lookup, first hit wins (a hit is a directory with tokenizer.json):
//!   1. --tokenizer DIR (given: only there; an error if it holds no tokenizer.json)
//!   2. $CALSERVE_TOKENIZER_DIR
//!   3. <binary dir>/../share/calserve/tokenizer-qwen3   (`cmake --install`)
//!   4. <data home>/tokenizer-qwen3                      (files copied by hand)
//!   5. <source tree>/.cache/tokenizer-qwen3              (tools/bootstrap; the
//!      checkout the binary was built from)
//!   6. ./.cache/tokenizer-qwen3
//! Data home: $CALSERVE_HOME, else $XDG_CACHE_HOME/calserve, else ~/.cache/calserve.
//!
//! Test hook: CALSERVE_NO_SOURCE_TREE=1 drops place 5, so a test can show that an
//! installed binary does without the checkout it was built from.
//!
//! Fault model: nothing found is an error value whose message names every place
//! looked, in order, and how to fix it; never an exception.
#include <filesystem>
#include <string>
#include <vector>

#include "config/result.hpp"

namespace calserve::tools {

// One place the lookup tries, with why it is on the list (for the message).
struct data_place {
    std::filesystem::path dir;
    std::string origin;  // "--tokenizer", "$CALSERVE_TOKENIZER_DIR", "installed data", ...
};

// The tokenizer places in lookup order (an unset variable is left out).
std::vector<data_place> tokenizer_places();

// The tokenizer directory: `given` (from --tokenizer) if not empty, else the first
// of tokenizer_places() holding tokenizer.json.
result<std::filesystem::path> find_tokenizer(const std::filesystem::path& given = {});

// Where the CLI writes what it builds for itself (packages/, soak-models/).
std::filesystem::path data_home();
// The default package of `serve` for a preset: <data home>/packages/<preset>.
std::filesystem::path default_package_dir(const std::string& preset);
// That package, written there first unless a current one is already there (a package
// an older calserve wrote, with other decode profiles, is rebuilt). Concurrent callers
// each build a copy; the first to finish publishes it.
result<std::filesystem::path> ensure_preset_package(const std::string& preset);
// Read-only data installed beside the binary (<bin>/../share/calserve), or empty
// when the binary's own path cannot be read.
std::filesystem::path installed_data_dir();

}  // namespace calserve::tools
