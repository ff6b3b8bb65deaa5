#pragma once
//! Builds the device's view of a package (`package_spec`) from the package model
//! (model/package) and the reference model's config.json (shape facts the latency
//! model needs). Every decode batch profile becomes one decode `submodel_desc`
//! (prefill first, then decode by ascending batch; `batch` = the largest profile,
//! `kv.slots` = full-context sequences the KV region holds).
//! Fault model: a package the device cannot represent (a batch > 1 prefill, a decode
//! batch outside 1..16, inputs not [B,1], logits not [B,1,vocab], a manifest batch
//! that is not the largest profile) is refused here with a model-class status,
//! before any device call.
#include <filesystem>

#include "config/result.hpp"
#include "device/types.hpp"
#include "model/package/package.hpp"

namespace calserve::device {

result<package_spec> package_spec_from(const model::package::package& pkg);
// Adds the sampling head's tensors (device/sampling_head.hpp) of top-k `k` to a decode
// program, placed after its last I/O buffer; package_spec_from does it for every decode
// program of a package that declares a head.
void add_sampling_head(submodel_desc& d, std::int64_t k);
// The same, placed from `next_address` on (advanced past the head's buffers).
void add_sampling_head(submodel_desc& d, std::int64_t k, std::uint64_t& next_address);
// Adds the scoring tensors (device/scoring.hpp) to a prefill program, placed from
// `next_address` on (advanced past them); package_spec_from does it for every prefill program.
void add_scoring(submodel_desc& d, std::uint64_t& next_address);
// The same, placed after the program's last I/O buffer.
void add_scoring(submodel_desc& d);
result<package_spec> package_spec_from_dir(const std::filesystem::path& dir);

}  // namespace calserve::device
