#pragma once
//! Builds the device's view of a package (`package_spec`) from the package model
//! (model/package) and the reference model's config.json (shape facts the latency
//! model needs). Fault model: a package the device cannot represent (batch > 1
//! programs, missing token input, logits not matching the vocab) is refused here
//! with a model-class status, before any device call.
#include <filesystem>

#include "config/result.hpp"
#include "device/types.hpp"
#include "model/package/package.hpp"

namespace calserve::device {

result<package_spec> package_spec_from(const model::package::package& pkg);
result<package_spec> package_spec_from_dir(const std::filesystem::path& dir);

}  // namespace calserve::device
