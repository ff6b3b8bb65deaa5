#pragma once
//! A GGUF checkpoint (Qwen3 / Qwen3-MoE, as llama.cpp writes them) seen as the
//! Hugging Face checkpoint the rest of model/ understands.
//!
//! Role: read the header (io/ reader, a growing prefix until the metadata fits),
//! turn the `qwen3.*` / `qwen3moe.*` hyperparameters into an `hf_config`, and load
//! the data section once (io_uring) with every tensor renamed to its Hugging Face
//! name (`blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight`; the 3-D
//! `ffn_*_exps` split into per-expert views) so the transformer binds weights the
//! same way for both formats, in place, with no copy or conversion.
//!
//! Fault model: a missing or mistyped hyperparameter, an unknown architecture or
//! tensor shapes that disagree with the hyperparameters are `package_invalid`
//! errors naming the key or tensor; header defects are caught by gguf.hpp.
//! Unknown tensors are kept under their GGUF names and ignored.
#include <filesystem>
#include <string>

#include "config/result.hpp"
#include "io/file_reader.hpp"
#include "model/weights/gguf.hpp"
#include "model/weights/hf_config.hpp"
#include "model/weights/safetensors.hpp"

namespace calserve::model {

// True when `path` is a regular file that starts with the GGUF magic.
bool is_gguf_file(const std::filesystem::path& path);

// The header of a GGUF file (reads only as much of the file as the header needs).
result<gguf::header> read_gguf_header(const std::filesystem::path& path, const io::read_options& opts = {});

// The model hyperparameters of a Qwen3 / Qwen3-MoE GGUF.
result<hf_config> hf_config_from_gguf(const gguf::header& h);

// The data section, tensors under their Hugging Face names (shapes outermost first).
result<safetensors_file> load_gguf_tensors(const std::filesystem::path& path, const gguf::header& h,
                                           const io::read_options& opts = {}, io::read_report* report = nullptr);

// Hugging Face tensor name -> GGUF name ("" when it has none); experts map to the
// 3-D tensor and set `*expert` (else -1).
std::string gguf_tensor_name(const std::string& hf_name, int* expert = nullptr);

// Writes `hf_dir` (config.json, safetensors, tokenizer.json + tokenizer_config.json)
// as a GGUF file: 2-D weights in `dtype` ("keep", "f32", "bf16", "f16", "q8_0"),
// 1-D norms in F32, experts stacked per layer, the tokenizer embedded.
void_result write_gguf_from_hf(const std::filesystem::path& hf_dir, const std::filesystem::path& out_file,
                               std::string_view dtype);

// Quantises n (a multiple of 32) floats to Q8_0 blocks (34 bytes per 32 values).
void quantize_q8_0(const float* x, std::int64_t n, std::byte* out);

}  // namespace calserve::model
