#pragma once
//! The safetensors container: parse and validate headers, load files, write them.
//!
//! Format: u64 little-endian header length N, N bytes of JSON
//! `{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}`,
//! then the data region; offsets are relative to its start.
//!
//! Fault model: a corrupted or truncated file is a `package_invalid` error that
//! names the file and the defect: header length past the end of the file, JSON
//! that does not parse, an unsupported dtype, offsets out of range or reversed,
//! a byte size that disagrees with dtype x shape. I/O failures keep their `io`
//! status. Invariant of a parsed header: every tensor's [begin, end) lies inside
//! the data region and end - begin == elements x dtype size.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/result.hpp"
#include "io/file_reader.hpp"
#include "model/core/aligned.hpp"

namespace calserve::model {

// q8_0 comes only from GGUF files: blocks of 32 int8 weights after an FP16 scale
// (34 bytes per 32 weights), so it has no per-element size: use dtype_bytes.
enum class dtype : std::uint8_t { f32, bf16, f16, q8_0 };

std::size_t dtype_size(dtype t);  // bytes per element; not for q8_0
// Bytes of `elements` consecutive values (a multiple of 32 for q8_0).
std::uint64_t dtype_bytes(dtype t, std::uint64_t elements);
std::string_view to_string(dtype t);  // safetensors spelling: F32, BF16, F16 (Q8_0)

struct tensor_info {
    std::string name;
    dtype type = dtype::f32;
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0;  // relative to the data region
    std::uint64_t end = 0;

    std::int64_t elements() const;
};

struct safetensors_header {
    std::uint64_t data_offset = 0;  // 8 + header length
    std::vector<tensor_info> tensors;
};

// Parses the JSON header text and checks every entry against `data_bytes`.
result<safetensors_header> parse_safetensors_header(std::string_view json_text, std::uint64_t data_bytes,
                                                    std::string_view file_label);

// A safetensors file read into memory (the data region only), tensors in their stored dtype.
struct safetensors_file {
    std::filesystem::path path;
    safetensors_header header;
    aligned_bytes data;  // 64-byte aligned: tensors at 64-byte offsets keep their rows on cache lines
    std::uint64_t data_bytes = 0;

    const std::byte* tensor_data(const tensor_info& t) const { return data.get() + t.begin; }
};

result<safetensors_file> load_safetensors(const std::filesystem::path& path, const io::read_options& opts = {},
                                          io::read_report* report = nullptr);

// A tensor to write; `bytes` must hold elements x dtype size bytes.
struct tensor_to_write {
    std::string name;
    dtype type = dtype::f32;
    std::vector<std::int64_t> shape;
    std::span<const std::byte> bytes;
};

// Writes a safetensors file (data region 8-byte aligned, tensors in the given order).
void_result write_safetensors(const std::filesystem::path& path, std::span<const tensor_to_write> tensors);

}  // namespace calserve::model
