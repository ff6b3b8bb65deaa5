#pragma once
//! A Hugging Face checkpoint directory held in memory, and typed views into it.
//!
//! Role: load `model.safetensors`, or the shards listed by
//! `model.safetensors.index.json` (or, lacking both, every `*.safetensors`), or a
//! GGUF file (gguf_model.hpp), and
//! hand out views by Hugging Face tensor name. Weights stay in their stored
//! dtype (BF16 stays BF16: decode is bound by weight read bandwidth).
//!
//! Fault model: a missing shard, a tensor listed twice, a missing tensor or a
//! shape/dtype that disagrees with what the model needs is a `package_invalid`
//! / `shape_mismatch` error naming the tensor and file. Invariant: views never
//! outlive the `checkpoint` that owns the bytes (the transformer owns both).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/result.hpp"
#include "io/file_reader.hpp"
#include "model/weights/safetensors.hpp"

namespace calserve::model {

// A row-major matrix view: `rows` x `cols` elements, rows `row_stride` elements
// apart (a column slice keeps the parent's stride). For q8_0, strides and column
// slices start on 32-element block boundaries (the loader checks the shapes).
struct tensor_view {
    dtype type = dtype::f32;
    std::int64_t rows = 0;
    std::int64_t cols = 0;
    std::int64_t row_stride = 0;
    const std::byte* data = nullptr;

    const std::byte* row(std::int64_t r) const {
        return data + dtype_bytes(type, static_cast<std::uint64_t>(r * row_stride));
    }
    tensor_view row_slice(std::int64_t begin, std::int64_t end) const {
        return {type, end - begin, cols, row_stride, row(begin)};
    }
    tensor_view col_slice(std::int64_t begin, std::int64_t end) const {
        return {type, rows, end - begin, row_stride, data + dtype_bytes(type, static_cast<std::uint64_t>(begin))};
    }
    std::int64_t bytes() const { return static_cast<std::int64_t>(dtype_bytes(type, static_cast<std::uint64_t>(rows * cols))); }
};

class checkpoint {
public:
    // `dir`: a Hugging Face directory, or a GGUF file (tensors under their HF names).
    static result<checkpoint> load(const std::filesystem::path& dir, const io::read_options& opts = {},
                                   io::read_report* report = nullptr);

    // The tensor `name` as a rows x cols matrix (a 1-D tensor of n is 1 x n).
    result<tensor_view> matrix(const std::string& name, std::int64_t rows, std::int64_t cols) const;
    // A 1-D tensor converted to FP32 (norm weights are tiny; converting once is free).
    result<std::vector<float>> vector_f32(const std::string& name, std::int64_t n) const;
    bool contains(const std::string& name) const { return index_.contains(name); }

    std::int64_t total_bytes() const { return total_bytes_; }
    std::size_t tensor_count() const { return index_.size(); }
    std::size_t file_count() const { return files_.size(); }

private:
    struct entry {
        std::size_t file = 0;
        std::size_t tensor = 0;
    };
    result<const tensor_info*> find(const std::string& name) const;
    void_result add_file(safetensors_file f);

    std::vector<safetensors_file> files_;
    std::unordered_map<std::string, entry> index_;
    std::int64_t total_bytes_ = 0;
};

}  // namespace calserve::model
