#include "model/tokenizer/bpe.hpp"

#include <algorithm>
#include <queue>

namespace calserve::model::detail {

bpe_merges::bpe_merges(std::size_t expected_merges) {
    std::size_t cap = 16;
    while (cap < expected_merges + expected_merges / 2) cap *= 2;  // load <= 2/3
    slots_.assign(cap, empty_slot);
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(cap));
    merged_.reserve(expected_merges);
}

void bpe_merges::insert(std::uint64_t slot) {
    std::size_t i = index_of(slot >> 24);
    while (slots_[i] != empty_slot) i = (i + 1) & (slots_.size() - 1);
    slots_[i] = slot;
    ++size_;
}

void bpe_merges::grow() {
    std::vector<std::uint64_t> old = std::move(slots_);
    slots_.assign(old.size() * 2, empty_slot);
    shift_ -= 1;
    size_ = 0;
    for (std::uint64_t s : old) {
        if (s != empty_slot) insert(s);
    }
}

bool bpe_merges::add(token_id left, token_id right, token_id merged) {
    auto rank = static_cast<std::int32_t>(merged_.size());
    if (left < 0 || right < 0 || merged < 0 || left > max_id || right > max_id || rank >= no_rank) return false;
    merged_.push_back(merged);
    if (rank_of(left, right) != no_rank) return true;  // the earlier, lower rank wins
    if ((size_ + 1) * 3 > slots_.size() * 2) grow();
    insert((key_of(left, right) << 24) | static_cast<std::uint64_t>(rank));
    return true;
}

std::int32_t bpe_merges::rank_of(token_id left, token_id right) const {
    std::uint64_t key = key_of(left, right);
    std::size_t i = index_of(key);
    while (true) {
        std::uint64_t s = slots_[i];
        if ((s >> 24) == key) return static_cast<std::int32_t>(s & 0xFFFFFF);
        if (s == empty_slot) return no_rank;
        i = (i + 1) & (slots_.size() - 1);
    }
}

void bpe_merges::index_byte_pairs() {
    for (std::size_t a = 0; a < 256; ++a) {
        for (std::size_t b = 0; b < 256; ++b) byte_pairs_[(a << 8) | b] = rank_of(byte_ids[a], byte_ids[b]);
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
    // Short words: symbols and the rank of each adjacent pair live in small arrays;
    // each round finds the lowest rank (leftmost on ties) and splices it out.
    if (word.size() > scan_limit) return encode_word_heap(word, out);
    std::array<token_id, scan_limit> sym;
    std::array<std::int32_t, scan_limit> rank;
    const std::size_t len = word.size();
    for (std::size_t i = 0; i < len; ++i) sym[i] = byte_ids[static_cast<std::uint8_t>(word[i])];
    for (std::size_t i = 0; i + 1 < len; ++i) {
        rank[i] = byte_pair_rank(static_cast<std::uint8_t>(word[i]), static_cast<std::uint8_t>(word[i + 1]));
    }
    std::size_t n = len;
    rank[n - 1] = no_rank;
    while (n > 1) {
        std::size_t best = 0;
        for (std::size_t i = 1; i + 1 < n; ++i) {
            if (rank[i] < rank[best]) best = i;
        }
        if (rank[best] == no_rank) break;
        sym[best] = merged_of(rank[best]);
        for (std::size_t i = best + 1; i + 1 < n; ++i) {
            sym[i] = sym[i + 1];
            rank[i] = rank[i + 1];
        }
        --n;
        rank[n - 1] = no_rank;
        if (best + 1 < n) rank[best] = rank_of(sym[best], sym[best + 1]);
        if (best > 0) rank[best - 1] = rank_of(sym[best - 1], sym[best]);
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
    auto at = [](std::int32_t i) { return static_cast<std::size_t>(i); };
    std::vector<node> nodes(word.size());
    std::vector<candidate> storage;
    storage.reserve(word.size());
    std::priority_queue<candidate, std::vector<candidate>, std::greater<>> heap(std::greater<>{}, std::move(storage));
    for (std::int32_t i = 0; i < n; ++i) {
        nodes[at(i)] = {byte_ids[static_cast<std::uint8_t>(word[at(i)])], i - 1, i + 1 < n ? i + 1 : -1, true};
    }
    for (std::int32_t i = 0; i + 1 < n; ++i) {
        std::int32_t r = byte_pair_rank(static_cast<std::uint8_t>(word[at(i)]), static_cast<std::uint8_t>(word[at(i) + 1]));
        if (r != no_rank) heap.push({r, i, nodes[at(i)].id, nodes[at(i + 1)].id});
    }
    auto push_pair = [&](std::int32_t left) {
        if (left < 0 || nodes[at(left)].next < 0) return;
        token_id a = nodes[at(left)].id;
        token_id b = nodes[at(nodes[at(left)].next)].id;
        std::int32_t r = rank_of(a, b);
        if (r != no_rank) heap.push({r, left, a, b});
    };
    while (!heap.empty()) {
        candidate c = heap.top();
        heap.pop();
        node& l = nodes[at(c.left)];
        if (!l.alive || l.id != c.left_id || l.next < 0) continue;
        node& r = nodes[at(l.next)];
        if (!r.alive || r.id != c.right_id) continue;
        l.id = merged_of(c.rank);
        r.alive = false;
        l.next = r.next;
        if (r.next >= 0) nodes[at(r.next)].prev = c.left;
        push_pair(l.prev);
        push_pair(c.left);
    }
    for (std::int32_t i = 0; i >= 0; i = nodes[at(i)].next) out.push_back(nodes[at(i)].id);
}

}  // namespace calserve::model::detail
