// The vocabulary side of the grammar engine: token bytes in byte-lexicographic order with
// each token's common prefix with its predecessor, so walks share prefixes and skip a whole
// run of tokens once their common prefix is rejected.
#include <algorithm>
#include <numeric>

#include "model/grammar/grammar.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace calserve::model::grammar {

std::shared_ptr<const vocabulary> vocabulary::build(const tokenizer& tok, std::span<const std::int32_t> eos_ids,
                                                    std::span<const std::int32_t> text_added) {
    const auto n = static_cast<std::size_t>(tok.vocab_size());
    std::vector<std::string> tokens(n);
    for (std::size_t id = 0; id < n; ++id) tokens[id] = std::string(tok.token_bytes_view(static_cast<std::int32_t>(id)));
    std::vector<std::int32_t> excluded;
    for (const std::int32_t id : tok.added_token_ids()) {
        if (std::find(text_added.begin(), text_added.end(), id) == text_added.end()) excluded.push_back(id);
    }
    return from_tokens(std::move(tokens), eos_ids, excluded);
}

std::shared_ptr<const vocabulary> vocabulary::from_tokens(std::vector<std::string> tokens,
                                                          std::span<const std::int32_t> eos_ids,
                                                          std::span<const std::int32_t> excluded) {
    auto v = std::make_shared<vocabulary>(vocabulary{});
    v->bytes_ = std::move(tokens);
    v->text_.assign(v->bytes_.size(), 1);
    for (std::size_t id = 0; id < v->bytes_.size(); ++id) {
        if (v->bytes_[id].empty()) v->text_[id] = 0;
    }
    auto in_range = [&](std::int32_t id) { return id >= 0 && static_cast<std::size_t>(id) < v->bytes_.size(); };
    for (const std::int32_t id : excluded) {
        if (in_range(id)) v->text_[static_cast<std::size_t>(id)] = 0;
    }
    for (const std::int32_t id : eos_ids) {
        if (!in_range(id)) continue;
        v->text_[static_cast<std::size_t>(id)] = 0;
        v->eos_.push_back(id);
    }
    v->index();
    return v;
}

void vocabulary::index() {
    sorted_.clear();
    for (std::size_t id = 0; id < bytes_.size(); ++id) {
        if (text_[id] != 0) sorted_.push_back(static_cast<std::int32_t>(id));
    }
    std::sort(sorted_.begin(), sorted_.end(), [&](std::int32_t a, std::int32_t b) {
        const auto& x = bytes_[static_cast<std::size_t>(a)];
        const auto& y = bytes_[static_cast<std::size_t>(b)];
        return x != y ? x < y : a < b;  // std::string compares as unsigned char
    });
    lcp_.assign(sorted_.size(), 0);
    for (std::size_t i = 1; i < sorted_.size(); ++i) {
        const std::string_view a = bytes(sorted_[i - 1]);
        const std::string_view b = bytes(sorted_[i]);
        std::size_t k = 0;
        while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
        lcp_[i] = static_cast<std::uint16_t>(std::min<std::size_t>(k, 0xFFFF));
    }
    first_byte_start_.assign(257, static_cast<std::uint32_t>(sorted_.size()));
    for (std::size_t i = sorted_.size(); i-- > 0;) {
        first_byte_start_[static_cast<unsigned char>(bytes(sorted_[i])[0])] = static_cast<std::uint32_t>(i);
    }
    for (std::size_t b = 256; b-- > 0;) first_byte_start_[b] = std::min(first_byte_start_[b], first_byte_start_[b + 1]);
}

bool vocabulary::is_eos(std::int32_t id) const { return std::find(eos_.begin(), eos_.end(), id) != eos_.end(); }

}  // namespace calserve::model::grammar
