#pragma once
//! Static package validator (`calserve validate`), gates A-F of docs/validation.md.
//!
//!   A inventory, sizes, hashes       B per-file grammar
//!   C cross-file consistency          D semantics (names, types, batch/context/vocab, units)
//!   E capacity per chip               F reproducibility (compiler commits, ONNX and golden hashes)
//!
//! Role: parse every file of a package with no device, derive the figures of
//! document 000 from the parsed files (not from the manifest), and report findings
//! with stable codes and severities. Fault model: a defect in the package is a
//! finding, never an exception or crash; only a missing directory or manifest is an
//! error result (the CLI's "unusable input", exit 2).
//! Invariants of a report: status is `fail` iff some finding has severity error,
//! `pass_with_warnings` iff no error and at least one warning, else `pass`.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "model/package/capacity.hpp"
#include "model/package/commands.hpp"
#include "model/package/package.hpp"

namespace calserve::model::package {

enum class severity : std::uint8_t { info, warning, error };
std::string_view to_string(severity s);

struct finding {
    std::string code;     // stable, e.g. "C_PING_PONG_ALIAS"
    severity level = severity::error;
    char gate = 'A';
    std::string file;     // relative path, "" for package-wide findings
    std::string message;
};

struct union_figures {
    std::uint64_t constant = 0, activation = 0, input = 0, total = 0;
    std::uint64_t largest_activation_interval = 0, largest_activation_start = 0;
};

struct chip_param_figures {
    std::uint32_t chip = 0;
    std::string file;
    std::uint64_t file_bytes = 0, dram_bytes = 0, sram_bytes = 0;
    bool closes = false;  // segments tile the file exactly
};

struct validation_figures {
    std::uint64_t param_bytes_total = 0;
    std::vector<chip_param_figures> params;
    std::uint64_t kv_bytes_total = 0, kv_bytes_per_chip = 0;
    // Keyed by submodel directory: "prefill", "decode" (batch 1), "decode_b4", ...
    std::map<std::string, union_figures> unions;
    std::vector<d2d_stats> prefill_d2d;                                 // per chip (ping streams)
    std::map<std::string, std::vector<std::map<std::string, std::uint64_t>>> op_families;  // dir -> chip
    std::map<std::string, std::vector<std::uint64_t>> profparts_lines;  // dir -> chip
    std::uint32_t context_package = 0, context_tokenizer = 0, context_model = 0, context_usable = 0;
    std::uint64_t file_count = 0;
};

struct validation_report {
    std::filesystem::path dir;
    std::string status;  // pass | pass_with_warnings | fail
    std::vector<finding> findings;
    validation_figures figures;
    std::vector<capacity_plan> capacity;  // the package's own KV region (kv.batch x kv.context)

    std::size_t count(severity s) const;
    bool has(std::string_view code) const;
    std::string to_json() const;
};

struct validate_options {
    bool full_hash = false;
    capacity_limits limits;
};

result<validation_report> validate_package(const std::filesystem::path& dir, const validate_options& o);

}  // namespace calserve::model::package
