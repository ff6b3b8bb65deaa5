#pragma once
//! GGUF v3 checkpoints (the llama.cpp file format): the header reader.
//!
//! Layout: "GGUF", u32 version (3), u64 tensor_count, u64 kv_count, then kv_count
//! metadata pairs (string key, u32 value type, value; arrays are u32 element type,
//! u64 count, elements), then tensor_count tensor infos (string name, u32 n_dims,
//! u64 dims innermost first, u32 ggml type, u64 offset into the data section),
//! padding to `general.alignment` (default 32), then the data section (a file with
//! no tensors may end without the padding). Strings are u64 length + bytes, all
//! little-endian. This is the project's one GGUF implementation: checkpoints
//! (gguf_model.hpp) and the package's vocabulary file (model/package/gguf.hpp).
//!
//! Fault model: the reader trusts nothing. Every count and length is bounded by
//! the bytes left before it allocates; the version, value types, tensor types,
//! dims (1-4, each >= 1, element count < 2^40, Q8_0 rows a multiple of 32), the
//! alignment (a power of two), offsets (aligned, inside the data section, tensors
//! not overlapping) and duplicate keys or names are checked; any defect is a
//! `package_invalid` (or `unsupported` for a valid but unhandled tensor type)
//! error naming the file, the field and the offset. Never aborts, never throws.
//!
//! Invariant of a parsed header: every tensor's [offset, offset + bytes) lies in
//! [0, data_bytes) and `dims` are Hugging Face order (outermost first).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/result.hpp"

namespace calserve::model::gguf {

enum class value_type : std::uint32_t {
    u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
    string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};

// The ggml tensor types this reader accepts (their ggml numbers).
enum class tensor_type : std::uint32_t { f32 = 0, f16 = 1, q8_0 = 8, bf16 = 30 };

constexpr std::int64_t k_q8_block = 32;         // Q8_0: 32 int8 weights ...
constexpr std::int64_t k_q8_block_bytes = 34;   // ... after one FP16 scale
constexpr std::uint32_t k_default_alignment = 32;
constexpr std::int64_t k_max_dims = 4;

// Bytes of `elements` values of `t` (elements a multiple of 32 for Q8_0).
std::uint64_t tensor_bytes(tensor_type t, std::uint64_t elements);
std::string_view to_string(tensor_type t);

// One metadata value. Integers and booleans live in `i` (an unsigned 64-bit value
// above INT64_MAX sets `too_big`), floats in `f`, strings in `s`; arrays hold
// their elements in `strings`, `ints` or `floats` by element type.
struct value {
    value_type type = value_type::u32;
    value_type elem = value_type::u32;  // arrays only
    std::int64_t i = 0;
    bool too_big = false;
    double f = 0.0;
    std::string s;
    std::vector<std::string> strings;
    std::vector<std::int64_t> ints;
    std::vector<double> floats;
};

struct tensor {
    std::string name;
    tensor_type type = tensor_type::f32;
    std::vector<std::int64_t> dims;  // outermost first (Hugging Face order): ggml's ne reversed
    std::uint64_t offset = 0;        // into the data section
    std::uint64_t bytes = 0;
    std::int64_t elements() const;
};

struct header {
    std::uint32_t version = 0;
    std::uint32_t alignment = k_default_alignment;
    std::map<std::string, value, std::less<>> kv;
    std::vector<tensor> tensors;
    std::uint64_t data_offset = 0;  // where the data section starts in the file
    std::uint64_t data_bytes = 0;   // file size - data_offset

    const value* find(std::string_view key) const;
    // Typed look-ups: an absent key is nullopt; a key of the wrong type is an error.
    result<std::optional<std::int64_t>> integer(std::string_view key) const;
    result<std::optional<double>> number(std::string_view key) const;  // floats or integers
    result<std::optional<std::string>> string(std::string_view key) const;
};

// Parses the header from the file's first `bytes.size()` bytes of a `file_bytes`-
// byte file. When the header runs past `bytes` but not past the file, the result
// is an error and `*need_more` is set (the caller reads a longer prefix).
result<header> parse_header(std::span<const std::byte> bytes, std::uint64_t file_bytes, std::string_view label,
                            bool* need_more = nullptr);

// Builds GGUF files (tests and `make-model --format gguf`).
class writer {
public:
    void add(std::string_view key, value v);
    void add_string(std::string_view key, std::string_view s);
    void add_u32(std::string_view key, std::uint32_t v);
    void add_f32(std::string_view key, float v);
    void add_bool(std::string_view key, bool v);
    bool find_key(std::string_view key) const;
    // `dims` outermost first; `data` holds exactly tensor_bytes(type, elements) bytes.
    void_result add_tensor(std::string_view name, tensor_type type, std::vector<std::int64_t> dims,
                           std::vector<std::byte> data);
    // The whole file (alignment 32; no padding after the header when there are no
    // tensors), to a stream or a string.
    void serialise(std::ostream& out) const;
    std::string serialise() const;
    void_result write(const std::filesystem::path& path) const;

private:
    std::vector<std::pair<std::string, value>> kv_;
    struct pending {
        std::string name;
        tensor_type type;
        std::vector<std::int64_t> dims;
        std::vector<std::byte> data;
    };
    std::vector<pending> tensors_;
};

}  // namespace calserve::model::gguf
