#pragma once
// A what-if candidate on the command line (`replay --what-if`, `twin`):
// "LABEL=ITEM[,ITEM]..." with ITEM one of package:DIR, preset:NAME (written under
// the data home) or key=value (configuration on top).
#include <filesystem>
#include <string>
#include <vector>

#include "config/result.hpp"

namespace calserve::tools {

struct candidate_spec {
    std::string label;
    std::filesystem::path package_dir;   // empty: the run's own
    std::vector<std::string> overrides;
};

result<candidate_spec> parse_candidate(const std::string& spec);

}  // namespace calserve::tools
