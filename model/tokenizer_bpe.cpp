#include "model/tokenizer_bpe.hpp"

#include <algorithm>
#include <limits>
#include <queue>

namespace calserve::model::detail {

bpe_merges::bpe_merges(std::size_t expected_merges) {
    std::size_t cap = 16;
    while (cap < expected_merges + expected_merges / 2) cap *= 2;  // load <= 2/3
    slots_.assign(cap, slot{empty_key, {0, 0}});
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(cap));
}

void bpe_merges::grow() {
    std::vector<slot> old = std::move(slots_);
    slots_.assign(old.size() * 2, slot{empty_key, {0, 0}});
    shift_ -= 1;
    size_ = 0;
    for (const slot& s : old) {
        if (s.key == empty_key) continue;
        std::size_t i = index_of(s.key);
        while (slots_[i].key != empty_key) i = (i + 1) & (slots_.size() - 1);
        slots_[i] = s;
        ++size_;
    }
}

void bpe_merges::add(token_id left, token_id right, token_id merged, std::int32_t rank) {
    if ((size_ + 1) * 4 > slots_.size() * 3) grow();
    std::uint64_t key = key_of(left, right);
    std::size_t i = index_of(key);
    while (slots_[i].key != empty_key) {
        if (slots_[i].key == key) return;
        i = (i + 1) & (slots_.size() - 1);
    }
    slots_[i] = slot{key, {rank, merged}};
    ++size_;
}

const bpe_merges::merge* bpe_merges::find(token_id left, token_id right) const {
    std::uint64_t key = key_of(left, right);
    std::size_t i = index_of(key);
    while (true) {
        const slot& s = slots_[i];
        if (s.key == key) return &s.value;
        if (s.key == empty_key) return nullptr;
        i = (i + 1) & (slots_.size() - 1);
    }
}

void bpe_merges::encode_word(std::string_view word, std::vector<token_id>& out) const {
    if (word.size() == 1) {
        out.push_back(byte_ids[static_cast<std::uint8_t>(word[0])]);
    } else if (word.size() <= scan_limit) {
        encode_word_scan(word, out);
    } else {
        encode_word_heap(word, out);
    }
}

void bpe_merges::encode_word_scan(std::string_view word, std::vector<token_id>& out) const {
    constexpr std::int32_t none = std::numeric_limits<std::int32_t>::max();
    // Short words: symbols and the rank of each adjacent pair live in small arrays;
    // each round finds the lowest rank (leftmost on ties) and splices it out.
    std::array<token_id, scan_limit> sym;
    std::array<std::int32_t, scan_limit> rank;
    if (word.size() > scan_limit) {
        encode_word_heap(word, out);
        return;
    }
    for (std::size_t i = 0; i < word.size(); ++i) sym[i] = byte_ids[static_cast<std::uint8_t>(word[i])];
    auto pair_rank = [&](std::size_t i) {
        const merge* m = find(sym[i], sym[i + 1]);
        return m ? m->rank : none;
    };
    std::size_t n = word.size();
    for (std::size_t i = 0; i + 1 < n; ++i) rank[i] = pair_rank(i);
    rank[n - 1] = none;
    while (n > 1) {
        std::size_t best = 0;
        for (std::size_t i = 1; i + 1 < n; ++i) {
            if (rank[i] < rank[best]) best = i;
        }
        if (rank[best] == none) break;
        sym[best] = find(sym[best], sym[best + 1])->merged;
        std::copy(sym.begin() + static_cast<std::ptrdiff_t>(best) + 2, sym.begin() + static_cast<std::ptrdiff_t>(n),
                  sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
        std::copy(rank.begin() + static_cast<std::ptrdiff_t>(best) + 2, rank.begin() + static_cast<std::ptrdiff_t>(n),
                  rank.begin() + static_cast<std::ptrdiff_t>(best) + 1);
        --n;
        rank[n - 1] = none;
        if (best + 1 < n) rank[best] = pair_rank(best);
        if (best > 0) rank[best - 1] = pair_rank(best - 1);
    }
    out.insert(out.end(), sym.begin(), sym.begin() + static_cast<std::ptrdiff_t>(n));
}

void bpe_merges::encode_word_heap(std::string_view word, std::vector<token_id>& out) const {
    // Long words: a doubly linked list of symbols and a min-heap of candidate
    // merges keyed by (rank, position of the left symbol). Entries are validated
    // when popped (both symbols alive, still adjacent, ids unchanged).
    struct node {
        token_id id;
        std::int32_t prev;
        std::int32_t next;
        bool alive;
    };
    struct candidate {
        std::int32_t rank;
        std::int32_t left;
        token_id left_id;
        token_id right_id;
        bool operator>(const candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    const auto n = static_cast<std::int32_t>(word.size());
    std::vector<node> nodes(word.size());
    for (std::int32_t i = 0; i < n; ++i) {
        nodes[static_cast<std::size_t>(i)] = {byte_ids[static_cast<std::uint8_t>(word[static_cast<std::size_t>(i)])],
                                              i - 1, i + 1 < n ? i + 1 : -1, true};
    }
    std::priority_queue<candidate, std::vector<candidate>, std::greater<>> heap;
    auto push_pair = [&](std::int32_t left) {
        if (left < 0) return;
        std::int32_t right = nodes[static_cast<std::size_t>(left)].next;
        if (right < 0) return;
        token_id a = nodes[static_cast<std::size_t>(left)].id;
        token_id b = nodes[static_cast<std::size_t>(right)].id;
        if (const merge* m = find(a, b)) heap.push({m->rank, left, a, b});
    };
    for (std::int32_t i = 0; i + 1 < n; ++i) push_pair(i);
    while (!heap.empty()) {
        candidate c = heap.top();
        heap.pop();
        node& l = nodes[static_cast<std::size_t>(c.left)];
        if (!l.alive || l.id != c.left_id || l.next < 0) continue;
        node& r = nodes[static_cast<std::size_t>(l.next)];
        if (!r.alive || r.id != c.right_id) continue;
        l.id = find(c.left_id, c.right_id)->merged;
        r.alive = false;
        l.next = r.next;
        if (r.next >= 0) nodes[static_cast<std::size_t>(r.next)].prev = c.left;
        push_pair(l.prev);
        push_pair(c.left);
    }
    for (std::int32_t i = 0; i >= 0; i = nodes[static_cast<std::size_t>(i)].next) out.push_back(nodes[static_cast<std::size_t>(i)].id);
}

}  // namespace calserve::model::detail
