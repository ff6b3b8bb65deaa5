#pragma once
// Shared by the tests of deploy/: running a tool, and the metric families a live
// daemon serves.
#include <filesystem>
#include <set>
#include <string>
#include <utility>

namespace calserve::test {

// Runs a shell command (stderr folded into stdout); returns its output and exit code.
std::pair<std::string, int> run_command(const std::string& command);

// The families (# TYPE lines) of a live daemon's /metrics, after one streamed request.
std::set<std::string> live_metric_families();

// deploy/<path> in the source tree.
std::filesystem::path deploy_path(const std::string& path);

}  // namespace calserve::test
