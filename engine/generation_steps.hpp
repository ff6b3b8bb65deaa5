#pragma once
// The pure parts of a generation load's steps, for the generation_controller's step
// machine (generation_controller.hpp), whichever driver runs it: refusals, gates A-F,
// placement beside what is resident, the warm-up and golden requests and the
// verdict. Pure functions of their inputs, so every host refuses, places and judges
// a package the same way and words it the same.
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "config/config.hpp"
#include "model/package/golden_corpus.hpp"
#include "model/package/package.hpp"
#include "model/package/placement.hpp"

namespace calserve::engine {

class serving_engine;

namespace steps {

// The warm-up request: one short greedy generation through the whole serving path.
inline constexpr std::int64_t k_warmup_tokens = 4;
inline constexpr actors::token_id k_warmup_token = 9707;

model::package::capacity_limits limits_of(const config& cfg);
std::uint32_t board_chips(const config& cfg);

// `model load`'s refusals before anything changes: no alias, not a directory, not a package.
void_result check_load(const std::string& alias, const std::filesystem::path& dir);

// Gates A-F, then the package itself ("validation failed: ..." names the first findings).
result<model::package::package> validate_and_open(const std::filesystem::path& dir, const config& cfg);

// Where the package goes beside `resident` bytes per chip (`chips` empty = first fit).
model::package::board_placement place_beside(const std::string& alias, const model::package::package& package,
                                             const std::vector<std::uint32_t>& chips, const config& cfg,
                                             const std::vector<std::uint64_t>& resident);

// A greedy request ignoring EOS (warm-up, golden corpus).
actors::generation_request greedy_request(std::string id, std::vector<actors::token_id> prompt, std::int64_t tokens,
                                  std::chrono::milliseconds timeout);
// An error or a timeout as the step's error (null when the request ended well).
std::optional<error_info> step_failure(const actors::generation_result& r, const std::string& tag);

// The golden corpus of the engine's package, as prompts and lengths.
struct golden_work {
    std::vector<model::package::golden_entry> corpus;
    std::vector<std::vector<actors::token_id>> prompts;
    std::vector<std::int64_t> lengths;
};
result<golden_work> golden_work_of(serving_engine& engine);
// The served continuations against the corpus ("golden check: ..." on a mismatch).
result<model::package::golden_verdict> judge_golden(const golden_work& work,
                                                    const std::vector<std::vector<actors::token_id>>& served);

}  // namespace steps
}  // namespace calserve::engine
