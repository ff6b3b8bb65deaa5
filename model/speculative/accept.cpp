// A verify row's emitted tokens (accept.hpp).
#include "model/speculative/accept.hpp"

#include <algorithm>

namespace calserve::model::speculative {

std::vector<token_id> emitted_tokens(std::span<const token_id> drafts, std::int64_t accepted, token_id drawn,
                                     std::int64_t tokens_left, std::span<const token_id> stop_ids) {
    accepted = std::clamp<std::int64_t>(accepted, 0, std::int64_t(drafts.size()));
    std::vector<token_id> run(drafts.begin(), drafts.begin() + accepted);
    run.push_back(drawn);
    std::size_t end = run.size();
    for (std::size_t i = 0; i < run.size(); ++i) {
        if (std::find(stop_ids.begin(), stop_ids.end(), run[i]) != stop_ids.end()) {
            end = i + 1;
            break;
        }
    }
    end = std::min<std::size_t>(end, std::size_t(std::max<std::int64_t>(0, tokens_left)));
    run.resize(end);
    return run;
}

}  // namespace calserve::model::speculative
