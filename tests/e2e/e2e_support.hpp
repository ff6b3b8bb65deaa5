#pragma once
// Shared helpers of the end-to-end tests: request bodies, daemon arguments,
// metric scraping, the detokenized reference, and the `calserve ctl` client.
#include <boost/json.hpp>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace calserve::test {

boost::json::array to_json(const std::vector<std::int32_t>& ids);

// A greedy /v1/completions body with ignore_eos and logprobs (usage included when streaming).
std::string completion_body(const std::vector<std::int32_t>& prompt, int max_tokens, bool stream,
                            std::int64_t timeout_ms = 0);

// `--package <test package> --served-model-name m --set log.level=warn` plus `--set` for each extra.
std::vector<std::string> serve_args(const std::string& preset, std::vector<std::string> extra = {});

// A greedy streamed completion's text, or "HTTP n: ..." / "malformed stream: ..." /
// "error: ..." / "cut: ..." (the connection ended before [DONE]).
std::string sse_text(std::uint16_t port, const std::vector<std::int32_t>& prompt, int max_tokens,
                     const std::string& model = "m");

// One series' value from /metrics, or -1 when absent.
double metric(std::uint16_t port, const std::string& series);

// The text a stream of `ids` shows, via the daemon's /detokenize. Ids past the
// tokenizer's vocabulary (the model's padding) decode to nothing, as in a stream.
std::string reference_text(std::uint16_t port, const std::vector<std::int32_t>& ids, const std::string& model = "");

// A fresh 0700 directory for a control socket; returns the socket path in it.
std::filesystem::path socket_path(const std::string& name);

// Runs `calserve ARGS` (stderr folded into stdout); returns its output and exit code.
std::pair<std::string, int> run_calserve(const std::string& args);

// Runs `calserve ctl --socket S --json ARGS`; returns its output and exit code.
std::pair<std::string, int> ctl(const std::filesystem::path& socket, const std::string& args);

// ctl that must succeed; returns the response's "result" object (fails the test otherwise).
boost::json::object ctl_result(const std::filesystem::path& socket, const std::string& args);

}  // namespace calserve::test
