#pragma once
//! Operator lists of a compiled submodel: the per-chip execution order
//! (`*.profparts`) and the op-level address map (`*_op_io_buf_ptr.yaml`).
//!
//! Role: one op model shared by the packer (which generates it from a preset)
//! and the validator (which parses it back and derives address-interval unions,
//! op-family counts and the KV interval from it).
//! Fault model: parsers return `package_invalid` with the line/op that failed;
//! they never throw (yaml-cpp exceptions are caught at the boundary).
//! Invariants of a parsed op map: ids are 0..n-1 in order; every tensor has
//! size == product(shape) * dtype bytes; producers refer to earlier ops.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "config/result.hpp"
#include "model/package/preset.hpp"

namespace calserve::model::package {

enum class tensor_kind : std::uint8_t { input, constant, activation };
std::string_view to_string(tensor_kind k);

struct op_tensor {
    tensor_kind kind = tensor_kind::activation;
    std::uint64_t addr = 0;
    std::uint64_t size = 0;
    std::vector<std::int64_t> shape;
    std::string dtype;               // "BF16", "INT32", "U8", ...
    std::int64_t producer = -1;      // op id that wrote it, -1 for inputs/constants
};

struct op_entry {
    std::uint32_t id = 0;
    std::string type;                // op family: rmsnorm, qmatmul, moe_grouped_dense, ...
    std::string name;                // unique per submodel, e.g. "l3.k_norm"
    std::int32_t layer = -1;
    std::vector<op_tensor> inputs;
    std::vector<op_tensor> outputs;
};

struct op_map {
    std::string submodel;
    std::uint32_t chip = 0;
    std::vector<op_entry> ops;
};

// Execution order of one chip (types and names only).
std::vector<op_entry> op_sequence(const preset_spec& s, submodel_role role, std::uint32_t chip);
// Chip0's op map of submodel `m` with every tensor placed in the package's address plan.
// Every decode profile shares the KV region and the decode SRAM scratch; its I/O tensors
// are its own buffers.
op_map build_op_map(const preset_spec& s, const package& p, const submodel& m);

std::string write_op_map_yaml(const op_map& m);
result<op_map> parse_op_map_yaml(std::string_view text);

// profparts: one op per line, "<index>\t<type>\t<name>\t<layer>".
std::string write_profparts(const std::vector<op_entry>& ops);
result<std::vector<op_entry>> parse_profparts(std::string_view text);

std::map<std::string, std::uint64_t> family_counts(const std::vector<op_entry>& ops);

}  // namespace calserve::model::package
