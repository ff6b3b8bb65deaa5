// runtime.speculative.* -> speculative_options (options.hpp).
#include "model/speculative/options.hpp"

#include <algorithm>

namespace calserve::model::speculative {

speculative_options speculative_options::from_config(const config& cfg) {
    speculative_options o;
    if (!parse_method(cfg.string("runtime.speculative.method"), o.drafter.kind)) o.drafter.kind = method::none;
    o.drafter.ngram.n_min = cfg.integer("runtime.speculative.ngram_min");
    o.drafter.ngram.n_max = std::max(o.drafter.ngram.n_min, cfg.integer("runtime.speculative.ngram_max"));
    o.policy.enabled = o.enabled();
    o.policy.max_drafts = cfg.integer("runtime.speculative.draft_tokens");
    o.policy.max_batch = cfg.integer("runtime.speculative.max_batch");
    return o;
}

}  // namespace calserve::model::speculative
