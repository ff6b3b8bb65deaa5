// The compile cache: (kind, text) -> compiled grammar, bounded LRU, one mutex held only
// for lookups and inserts.
#include <functional>

#include "model/grammar/grammar.hpp"

namespace calserve::model::grammar {

compile_cache::compile_cache(std::shared_ptr<const vocabulary> vocab, std::size_t capacity)
    : vocab_(std::move(vocab)), capacity_(capacity == 0 ? 1 : capacity) {}

result<std::shared_ptr<const compiled>> compile_cache::get(grammar_kind kind, std::string_view text) {
    std::string key(1, static_cast<char>('0' + static_cast<int>(kind)));
    if (kind != grammar_kind::json_object) key.append(text);
    const std::size_t h = std::hash<std::string>{}(key);
    {
        std::lock_guard lock(mutex_);
        if (auto it = index_.find(h); it != index_.end()) {
            for (const auto& e : it->second) {
                if (e->key != key) continue;
                lru_.splice(lru_.begin(), lru_, e);
                ++hits_;
                return e->value;
            }
        }
        ++misses_;
    }
    // Compiled outside the lock: a slow schema does not stall hits on other threads (two
    // threads missing on the same new text both compile it; the second insert is dropped).
    std::string ebnf;
    if (kind == grammar_kind::json_schema) {
        auto converted = json_schema_to_ebnf(text);
        if (!converted) return converted.error();
        ebnf = std::move(converted.value());
    } else {
        ebnf = kind == grammar_kind::json_object ? json_object_ebnf() : std::string(text);
    }
    auto c = compile(ebnf, vocab_);
    if (!c) return c.error();
    std::lock_guard lock(mutex_);
    auto& bucket = index_[h];
    for (const auto& e : bucket) {
        if (e->key == key) return e->value;
    }
    lru_.push_front({key, c.value()});
    bucket.push_back(lru_.begin());
    if (lru_.size() > capacity_) {
        auto last = std::prev(lru_.end());
        const std::size_t last_h = std::hash<std::string>{}(last->key);
        auto& old = index_[last_h];
        std::erase(old, last);
        if (old.empty()) index_.erase(last_h);
        lru_.pop_back();
    }
    return c.value();
}

std::size_t compile_cache::size() const {
    std::lock_guard lock(mutex_);
    return lru_.size();
}
std::uint64_t compile_cache::hits() const {
    std::lock_guard lock(mutex_);
    return hits_;
}
std::uint64_t compile_cache::misses() const {
    std::lock_guard lock(mutex_);
    return misses_;
}

}  // namespace calserve::model::grammar
