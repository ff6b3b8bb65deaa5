// The per-request matcher: the mask is the union, over the parse state's stacks, of the
// tokens their top position accepts on its own, plus those of its context-dependent
// tokens that the real stack accepts (walked in sorted order, sharing prefixes). Whole
// masks are memoised by parse state, which repeats inside strings and lists.
#include <algorithm>

#include "model/grammar/compiled.hpp"

namespace calserve::model::grammar {

// Per request: the first states met get dense transition rows (256 KiB at most); the
// tables start presized so that early steps do not pause to rehash.
constexpr std::size_t k_matcher_dense_states = 256;
constexpr std::size_t k_matcher_reserve = 1024;

struct matcher_state {
    struct memo_entry {
        std::uint32_t state = 0;
        std::vector<std::uint32_t> words;
    };

    explicit matcher_state(std::shared_ptr<const compiled> grammar)
        : c(std::move(grammar)), pool(k_matcher_reserve), automaton(c->g, pool, k_matcher_dense_states, k_matcher_reserve) {}

    std::shared_ptr<const compiled> c;
    detail::stack_pool pool;
    detail::state_automaton automaton;  // per request: its states and their transitions
    std::uint32_t cur = 0;              // parse state (automaton id); 0 only after overflow
    std::vector<std::uint32_t> scratch;
    std::vector<memo_entry> memo;
    std::size_t memo_next = 0;
    std::size_t bytes = 0;
    bool overflow = false;

    void set_eos(std::span<std::uint32_t> words) const {
        for (const std::int32_t id : c->vocab->eos_ids()) words[static_cast<std::size_t>(id) / 32] |= 1u << (id % 32);
    }

    // Context-dependent tokens of node n's position: each group's suffix walked from
    // where n's rule returns to (its real caller); a pass admits the whole group.
    void check_context(const detail::node& n, const detail::slot_table& t, std::span<std::uint32_t> words) {
        scratch.clear();
        detail::stepper(c->g, pool).resume(n.parent, scratch);
        std::sort(scratch.begin(), scratch.end());
        scratch.erase(std::unique(scratch.begin(), scratch.end()), scratch.end());
        const std::uint32_t caller = automaton.intern(scratch);
        for (const auto& g : t.ctx) {
            std::uint32_t s = caller;
            for (const char ch : g.suffix) {
                s = automaton.next(s, static_cast<std::uint8_t>(ch));
                if (s == 0) break;
            }
            if (s == 0) continue;
            for (const std::int32_t id : g.ids) words[static_cast<std::size_t>(id) / 32] |= 1u << (id % 32);
        }
    }

    void compute(std::span<std::uint32_t> words) {
        std::fill(words.begin(), words.end(), 0u);
        const std::vector<std::uint32_t> nodes = automaton.nodes(cur);  // copy: walks intern states
        for (const std::uint32_t n : nodes) {
            if (n == 0) {
                set_eos(words);
                continue;
            }
            const detail::node nd = pool.at(n);
            const detail::slot_table& t = c->slots[c->slot_base[nd.pos] + nd.state];
            if (!t.bits.empty()) {
                for (std::size_t w = 0; w < words.size(); ++w) words[w] |= t.bits[w];
            }
            for (const std::int32_t id : t.ids) words[static_cast<std::size_t>(id) / 32] |= 1u << (id % 32);
            if (!t.ctx.empty()) check_context(nd, t, words);
        }
    }
};

matcher::matcher(std::shared_ptr<const compiled> grammar) : s_(std::make_unique<matcher_state>(std::move(grammar))) {
    std::vector<std::uint32_t> start;
    detail::stepper(s_->c->g, s_->pool).initial(start);
    s_->cur = s_->automaton.intern(start);
}

matcher::~matcher() = default;
matcher::matcher(matcher&&) noexcept = default;
matcher& matcher::operator=(matcher&&) noexcept = default;

std::size_t matcher::vocab_size() const { return s_->c->vocab->size(); }
std::size_t matcher::mask_words() const { return s_->c->vocab->mask_words(); }

void matcher::fill_mask(std::span<std::uint32_t> words) {
    matcher_state& s = *s_;
    if (words.size() != mask_words()) return;  // caller error: nothing is allowed
    if (s.overflow) {
        std::fill(words.begin(), words.end(), 0u);
        s.set_eos(words);
        return;
    }
    for (const auto& e : s.memo) {
        if (e.state == s.cur) {
            std::copy(e.words.begin(), e.words.end(), words.begin());
            return;
        }
    }
    s.compute(words);
    if (s.memo.size() < k_mask_memo_entries) s.memo.emplace_back();
    auto& slot = s.memo[s.memo_next++ % s.memo.size()];
    slot.state = s.cur;
    slot.words.assign(words.begin(), words.end());
}

bool matcher::accept(std::int32_t token) {
    matcher_state& s = *s_;
    const vocabulary& v = *s.c->vocab;
    if (token < 0 || static_cast<std::size_t>(token) >= v.size()) return false;
    if (!v.is_text(token)) {
        if (!v.is_eos(token) || !accepting()) return false;
        s.cur = s.automaton.intern({0});
        s.overflow = false;
        return true;
    }
    if (s.overflow) return false;
    std::uint32_t state = s.cur;
    for (const char ch : v.bytes(token)) {
        state = s.automaton.next(state, static_cast<std::uint8_t>(ch));
        if (state == 0) return false;
    }
    s.bytes += v.bytes(token).size();
    if (s.automaton.nodes(state).size() > k_max_stacks) {
        s.overflow = true;
        return true;
    }
    s.cur = state;
    return true;
}

bool matcher::accepting() const { return s_->overflow || s_->automaton.ended(s_->cur); }
bool matcher::terminated() const {
    return !s_->overflow && s_->automaton.nodes(s_->cur).size() == 1 && s_->automaton.ended(s_->cur);
}
bool matcher::overflowed() const { return s_->overflow; }
std::size_t matcher::bytes_consumed() const { return s_->bytes; }

}  // namespace calserve::model::grammar
