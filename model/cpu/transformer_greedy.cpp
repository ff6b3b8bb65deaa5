// Greedy reference runs; see transformer_greedy.hpp.
#include "model/cpu/transformer_greedy.hpp"

#include <algorithm>

namespace calserve::model {

std::vector<std::pair<token_id, float>> top_k_logits(std::span<const float> logits, std::int64_t k) {
    const auto n = static_cast<std::int64_t>(logits.size());
    k = std::clamp<std::int64_t>(k, 1, std::max<std::int64_t>(n, 1));
    auto better = [](const std::pair<token_id, float>& a, const std::pair<token_id, float>& b) {
        return a.second > b.second || (a.second == b.second && a.first < b.first);
    };
    // A bounded heap of the best k seen so far: O(n log k).
    std::vector<std::pair<token_id, float>> heap;
    heap.reserve(static_cast<std::size_t>(k));
    for (std::int64_t i = 0; i < n; ++i) {
        std::pair<token_id, float> c{static_cast<token_id>(i), logits[static_cast<std::size_t>(i)]};
        if (static_cast<std::int64_t>(heap.size()) < k) {
            heap.push_back(c);
            std::push_heap(heap.begin(), heap.end(), better);
        } else if (better(c, heap.front())) {
            std::pop_heap(heap.begin(), heap.end(), better);
            heap.back() = c;
            std::push_heap(heap.begin(), heap.end(), better);
        }
    }
    std::sort(heap.begin(), heap.end(), better);
    return heap;
}

result<greedy_run> run_greedy(causal_lm& lm, seq_id seq, std::span<const token_id> prompt, std::int64_t max_tokens,
                              std::int64_t top_k) {
    std::vector<float> logits(static_cast<std::size_t>(lm.shape().vocab_size));
    greedy_run run;
    auto finish = [&](void_result r) -> result<greedy_run> {
        lm.free_sequence(seq);
        if (!r) return r.error();
        return std::move(run);
    };
    if (auto r = lm.prefill(seq, prompt, logits); !r) return finish(r);
    for (std::int64_t step = 0; step < max_tokens; ++step) {
        auto top = top_k_logits(logits, std::max<std::int64_t>(top_k, 1));
        const token_id next = top.front().first;
        if (top_k < 1) top.clear();
        run.steps.push_back({std::move(top)});
        run.generated.push_back(next);
        if (next == lm.shape().eos_token_id || step + 1 == max_tokens) break;
        if (auto r = lm.decode(seq, next, logits); !r) return finish(r);
    }
    return finish({});
}

}  // namespace calserve::model
