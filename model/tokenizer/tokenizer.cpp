// Encoding and decoding over the loaded tokenizer_data (see tokenizer.hpp for the
// pipeline). Loading lives in tokenizer_load.cpp, the chat template in chat_template.cpp.
#include "model/tokenizer/tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "model/tokenizer/cache.hpp"
#include "model/tokenizer/data.hpp"

namespace calserve::model {
namespace {

using detail::tokenizer_data;

// Longest added token starting at text[pos], or nullptr.
const detail::added_token* match_added(const tokenizer_data& d, std::string_view text, std::size_t pos) {
    for (std::uint16_t i : d.added_by_first_byte[static_cast<std::uint8_t>(text[pos])]) {
        const std::string& c = d.added[i].content;
        if (text.compare(pos, c.size(), c) == 0) return &d.added[i];
    }
    return nullptr;
}

std::string_view trim_js_whitespace(std::string_view s, bool left, bool right) {
    if (left) {
        std::size_t i = 0;
        while (i < s.size()) {
            std::size_t next = i;
            if (!detail::is_js_whitespace(detail::next_code_point(s, next))) break;
            i = next;
        }
        s.remove_prefix(i);
    }
    while (right && !s.empty()) {
        std::size_t start = s.size() - 1;
        while (start > 0 && (static_cast<std::uint8_t>(s[start]) & 0xC0) == 0x80) --start;
        std::size_t next = start;
        if (!detail::is_js_whitespace(detail::next_code_point(s, next))) break;
        s.remove_suffix(s.size() - start);
    }
    return s;
}

struct encoder {
    const tokenizer_data& d;
    std::vector<token_id>& out;
    detail::word_cache& cache;
    std::size_t limit = std::numeric_limits<std::size_t>::max();  // ids beyond which encoding stops
    std::size_t token_bytes_max = 1;

    bool over() const { return out.size() > limit; }

    void word(std::string_view w) {
        if (over()) return;  // the regex still scans the rest of the segment; BPE does not
        if (w.size() == 1) {
            out.push_back(d.merges.byte_ids[static_cast<std::uint8_t>(w[0])]);
            return;
        }
        if (w.size() > detail::word_cache::max_word) {
            d.merges.encode_word(w, out);
            return;
        }
        std::uint64_t hash = std::hash<std::string_view>{}(w);
        if (cache.lookup(w, hash, out)) return;
        std::size_t first = out.size();
        d.merges.encode_word(w, out);
        cache.store(w, hash, std::span<const token_id>(out).subspan(first));
    }

    void_result split_and_merge(std::string_view text, std::size_t step) {
        if (step == d.splits.size()) {
            word(text);
            return {};
        }
        void_result nested;
        auto r = d.splits[step]->split(text, [&](std::string_view piece) {
            if (step + 1 == d.splits.size()) {
                word(piece);
            } else if (nested) {
                nested = split_and_merge(piece, step + 1);
            }
        });
        return r ? nested : r;
    }

    void_result segment(std::string_view text) {
        if (text.empty()) return {};
        std::string normalized;
        if (d.nfc) {
            auto changed = d.normalizer.normalize(text, normalized);
            if (!changed) return changed.error();
            if (*changed) text = normalized;
        }
        // Each token covers at most token_bytes_max bytes of the normalised segment.
        const std::size_t at_least = (text.size() + token_bytes_max - 1) / token_bytes_max;
        if (limit != std::numeric_limits<std::size_t>::max() && out.size() + at_least > limit) {
            out.resize(limit + 1);  // marks the overflow; the ids are discarded
            return {};
        }
        return split_and_merge(text, 0);
    }
};

}  // namespace

tokenizer::tokenizer(std::unique_ptr<detail::tokenizer_data> data) : data_(std::move(data)) {}
tokenizer::~tokenizer() = default;

result<std::shared_ptr<const tokenizer>> tokenizer::load(const std::filesystem::path& dir) {
    auto data = detail::load_tokenizer_data(dir);
    if (!data) return data.error();
    return std::shared_ptr<const tokenizer>(new tokenizer(std::move(data.value())));
}

result<std::vector<token_id>> tokenizer::encode(std::string_view text) const {
    return encode(text, std::numeric_limits<std::int64_t>::max());
}

result<std::vector<token_id>> tokenizer::encode(std::string_view text, std::int64_t max_tokens) const {
    // Merge positions are 32-bit; no request comes near this (HTTP bodies are capped far lower).
    constexpr std::size_t max_input_bytes = std::size_t{1} << 30;
    if (text.size() > max_input_bytes) {
        return make_error(status::invalid_argument, "input of " + std::to_string(text.size()) +
                                                        " bytes exceeds the tokenizer limit of 1 GiB");
    }
    if (std::size_t bad = detail::find_invalid_utf8(text); bad != detail::utf8_valid) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(static_cast<std::uint8_t>(text[bad])));
        return make_error(status::invalid_argument,
                          "input is not valid UTF-8 (byte " + std::string(hex) + " at offset " + std::to_string(bad) + ")");
    }
    const tokenizer_data& d = *data_;
    std::vector<token_id> ids;
    const bool limited = max_tokens < std::numeric_limits<std::int64_t>::max();
    ids.reserve(limited ? std::min(text.size() / 3 + 4, std::size_t(std::max<std::int64_t>(max_tokens, 0)) + 1)
                        : text.size() / 3 + 4);
    encoder enc{d, ids, detail::thread_word_cache(d.generation)};
    if (limited) {
        enc.limit = std::size_t(std::max<std::int64_t>(max_tokens, 0));
        enc.token_bytes_max = std::max<std::size_t>(1, d.max_token_bytes);
    }
    auto overflow = [&] {
        return make_error(status::context_overflow, "more than " + std::to_string(max_tokens) + " tokens");
    };
    // Added tokens are cut out first; the text between them goes through the
    // normaliser, the pre-tokenizer and BPE. An added token with lstrip/rstrip
    // eats the whitespace next to it (as transformers.js does).
    std::size_t seg_start = 0;
    bool strip_next_left = false;
    for (std::size_t pos = 0; pos < text.size(); ++pos) {
        if (d.added_by_first_byte[static_cast<std::uint8_t>(text[pos])].empty()) continue;
        const detail::added_token* t = match_added(d, text, pos);
        if (!t) continue;
        auto seg = trim_js_whitespace(text.substr(seg_start, pos - seg_start), strip_next_left, t->lstrip);
        if (auto r = enc.segment(seg); !r) return r.error();
        if (enc.over()) return overflow();
        ids.push_back(t->id);
        strip_next_left = t->rstrip;
        seg_start = pos + t->content.size();
        pos = seg_start - 1;
    }
    auto tail = trim_js_whitespace(text.substr(seg_start), strip_next_left, false);
    if (auto r = enc.segment(tail); !r) return r.error();
    if (enc.over()) return overflow();
    return ids;
}

std::size_t tokenizer::max_token_bytes() const { return data_->max_token_bytes; }

std::optional<std::size_t> tokenizer::max_text_bytes(std::int64_t tokens) const {
    for (const auto& a : data_->added)
        if (a.lstrip || a.rstrip) return std::nullopt;
    const auto per_token = data_->max_token_bytes * (data_->nfc ? k_nfc_max_shrink : 1);
    const auto n = static_cast<std::size_t>(std::max<std::int64_t>(tokens, 0));
    if (per_token != 0 && n > std::numeric_limits<std::size_t>::max() / per_token) return std::nullopt;
    return n * per_token;
}

result<std::string> tokenizer::decode(std::span<const token_id> ids) const {
    std::string raw;
    for (token_id id : ids) {
        if (!data_->has_id(id)) {
            return make_error(status::invalid_argument, "unknown token id " + std::to_string(id) + " (vocab size " +
                                                             std::to_string(vocab_size()) + ")");
        }
        raw += data_->bytes_of(id);
    }
    std::string text;
    text.reserve(raw.size());
    detail::append_utf8_lossy(text, raw);
    return text;
}

std::int64_t tokenizer::vocab_size() const { return static_cast<std::int64_t>(data_->tokens.size()); }

std::optional<token_id> tokenizer::token_to_id(std::string_view token) const {
    auto it = data_->token_ids.find(token);
    if (it == data_->token_ids.end()) return std::nullopt;
    return it->second;
}

std::string_view tokenizer::id_to_token(token_id id) const {
    return data_->has_id(id) ? std::string_view(data_->tokens[static_cast<std::size_t>(id)]) : std::string_view{};
}

std::vector<token_id> tokenizer::eos_token_ids() const { return data_->eos_ids; }

std::int64_t tokenizer::model_max_length() const { return data_->model_max_length; }

std::string_view tokenizer::token_bytes_view(token_id id) const {
    return data_->has_id(id) ? data_->bytes_of(id) : std::string_view{};
}

std::vector<std::uint8_t> tokenizer::token_bytes(token_id id) const {
    std::string_view b = token_bytes_view(id);
    return std::vector<std::uint8_t>(b.begin(), b.end());
}

bool tokenizer::is_special(token_id id) const {
    return data_->has_id(id) && data_->special[static_cast<std::size_t>(id)] != 0;
}

std::vector<token_id> tokenizer::added_token_ids() const {
    std::vector<token_id> ids;
    for (const auto& t : data_->added) ids.push_back(t.id);
    return ids;
}

}  // namespace calserve::model
