// Loading of tokenizer.json + tokenizer_config.json into tokenizer_data. Every
// rejection names the file and the field, so a wrong or exotic tokenizer is
// diagnosed at load instead of producing wrong ids later.
#include <algorithm>
#include <atomic>
#include <limits>

#include <boost/json.hpp>

#include "config/read_file.hpp"
#include "model/tokenizer/data.hpp"

namespace calserve::model::detail {
namespace {

namespace json = boost::json;

// The GPT-2 pre-tokenizer regex, used by ByteLevel{use_regex: true}.
constexpr const char* gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

error_info bad(std::string_view what) { return make_error(status::parse_error, "tokenizer.json: " + std::string(what)); }
error_info unsupported(std::string_view what) {
    return make_error(status::unsupported, "tokenizer.json: unsupported " + std::string(what));
}

const json::value* field(const json::object& o, std::string_view key) {
    auto it = o.find(key);
    return it == o.end() || it->value().is_null() ? nullptr : &it->value();
}

bool flag(const json::object& o, std::string_view key, bool fallback) {
    const json::value* v = field(o, key);
    return v && v->is_bool() ? v->as_bool() : fallback;
}

std::string_view text(const json::object& o, std::string_view key) {
    const json::value* v = field(o, key);
    return v && v->is_string() ? std::string_view(v->as_string()) : std::string_view{};
}

void set_token(tokenizer_data& d, token_id id, std::string token) {
    auto i = static_cast<std::size_t>(id);
    if (i >= d.tokens.size()) {
        d.tokens.resize(i + 1);
        d.known.resize(i + 1, 0);
        d.special.resize(i + 1, 0);
    }
    d.tokens[i] = std::move(token);
    d.known[i] = 1;
}

void_result load_vocab(const json::object& model, tokenizer_data& d) {
    const json::value* vocab = field(model, "vocab");
    if (!vocab || !vocab->is_object()) return bad("model.vocab must be an object");
    d.tokens.reserve(vocab->as_object().size() + 512);
    for (const auto& kv : vocab->as_object()) {
        if (!kv.value().is_int64() || kv.value().as_int64() < 0 || kv.value().as_int64() > (1 << 24)) {
            return bad("model.vocab entry '" + std::string(kv.key()) + "' has an invalid id");
        }
        auto id = static_cast<token_id>(kv.value().as_int64());
        set_token(d, id, std::string(kv.key()));
        d.token_ids.emplace(std::string(kv.key()), id);
    }
    if (auto b = fill_byte_ids(d)) return bad("byte-level vocab lacks the token for byte " + std::to_string(*b));
    return {};
}


void_result load_merges(const json::object& model, tokenizer_data& d) {
    const json::value* merges = field(model, "merges");
    if (!merges || !merges->is_array()) return bad("model.merges must be an array");
    d.merges = bpe_merges(merges->as_array().size());
    std::int32_t rank = 0;
    for (const json::value& m : merges->as_array()) {
        std::string left, right;
        if (m.is_string()) {
            std::string_view s = m.as_string();
            auto space = s.find(' ');
            if (space == std::string_view::npos) return bad("merge " + std::to_string(rank) + " is not 'a b'");
            left = s.substr(0, space);
            right = s.substr(space + 1);
        } else if (m.is_array() && m.as_array().size() == 2 && m.as_array()[0].is_string() &&
                   m.as_array()[1].is_string()) {
            left = m.as_array()[0].as_string();
            right = m.as_array()[1].as_string();
        } else {
            return bad("merge " + std::to_string(rank) + " is neither 'a b' nor [a, b]");
        }
        auto l = d.token_ids.find(left);
        auto r = d.token_ids.find(right);
        auto merged = d.token_ids.find(left + right);
        if (l == d.token_ids.end() || r == d.token_ids.end() || merged == d.token_ids.end()) {
            return bad("merge " + std::to_string(rank) + " ('" + left + "' '" + right + "') uses a token not in the vocab");
        }
        if (!d.merges.add(l->second, r->second, merged->second)) {
            return unsupported("merge table: ids above 2^20 or more than 2^24 merges");
        }
        ++rank;
    }
    return {};
}

void_result load_model(const json::object& root, tokenizer_data& d) {
    const json::value* model = field(root, "model");
    if (!model || !model->is_object()) return bad("missing 'model'");
    const json::object& m = model->as_object();
    if (text(m, "type") != "BPE") return unsupported("model type '" + std::string(text(m, "type")) + "' (only BPE)");
    if (flag(m, "byte_fallback", false)) return unsupported("model.byte_fallback");
    if (flag(m, "ignore_merges", false)) return unsupported("model.ignore_merges");
    if (!text(m, "continuing_subword_prefix").empty() || !text(m, "end_of_word_suffix").empty()) {
        return unsupported("model subword prefix/suffix");
    }
    if (auto r = load_vocab(m, d); !r) return r;
    // The byte vocab must exist before merges reset the table (byte_ids survive).
    auto byte_ids = d.merges.byte_ids;
    if (auto r = load_merges(m, d); !r) return r;
    d.merges.byte_ids = byte_ids;
    d.merges.index_byte_pairs();
    return {};
}

void_result load_added_tokens(const json::object& root, tokenizer_data& d) {
    const json::value* added = field(root, "added_tokens");
    if (!added) return {};
    if (!added->is_array()) return bad("added_tokens must be an array");
    for (const json::value& v : added->as_array()) {
        if (!v.is_object()) return bad("added_tokens entry is not an object");
        const json::object& o = v.as_object();
        const json::value* id = field(o, "id");
        std::string_view content = text(o, "content");
        if (!id || !id->is_int64() || id->as_int64() < 0 || id->as_int64() > (1 << 24) || content.empty()) {
            return bad("added_tokens entry needs an id and a non-empty content");
        }
        if (find_invalid_utf8(content) != utf8_valid) return bad("added token content is not UTF-8");
        added_token t{std::string(content), static_cast<token_id>(id->as_int64()), flag(o, "special", false),
                      flag(o, "lstrip", false), flag(o, "rstrip", false)};
        set_token(d, t.id, t.content);
        d.special[static_cast<std::size_t>(t.id)] = t.special ? 1 : 0;
        d.token_ids[t.content] = t.id;
        d.added.push_back(std::move(t));
    }
    return index_added_tokens(d);
}

}  // namespace

std::optional<int> fill_byte_ids(tokenizer_data& d) {
    const auto& alphabet = byte_level_alphabet();
    for (int b = 0; b < 256; ++b) {
        auto it = d.token_ids.find(alphabet[static_cast<std::size_t>(b)]);
        if (it == d.token_ids.end()) return b;
        d.merges.byte_ids[static_cast<std::size_t>(b)] = it->second;
    }
    return std::nullopt;
}

void_result index_added_tokens(tokenizer_data& d) {
    if (d.added.size() > std::numeric_limits<std::uint16_t>::max()) return unsupported("more than 65535 added tokens");
    for (std::size_t i = 0; i < d.added.size(); ++i) {
        d.added_by_first_byte[static_cast<std::uint8_t>(d.added[i].content[0])].push_back(static_cast<std::uint16_t>(i));
    }
    for (auto& bucket : d.added_by_first_byte) {
        std::stable_sort(bucket.begin(), bucket.end(), [&](std::uint16_t a, std::uint16_t b) {
            return d.added[a].content.size() > d.added[b].content.size();
        });
    }
    return {};
}

namespace {

void_result load_normalizer(const json::object& root, tokenizer_data& d) {
    const json::value* n = field(root, "normalizer");
    if (!n) return {};
    if (!n->is_object()) return bad("normalizer must be an object");
    std::string_view type = text(n->as_object(), "type");
    if (type == "NFC") {
        d.nfc = true;
        return {};
    }
    if (type == "Sequence") {
        const json::value* list = field(n->as_object(), "normalizers");
        if (list && list->is_array() && list->as_array().empty()) return {};
        if (list && list->is_array() && list->as_array().size() == 1 && list->as_array()[0].is_object() &&
            text(list->as_array()[0].as_object(), "type") == "NFC") {
            d.nfc = true;
            return {};
        }
    }
    return unsupported("normalizer '" + std::string(type) + "' (only NFC)");
}

std::string escape_literal(std::string_view s) {
    std::string out;
    for (char c : s) {
        if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out.push_back('\\');
        out.push_back(c);
    }
    return out;
}

void_result add_split(tokenizer_data& d, const std::string& pattern) {
    auto re = split_regex::compile(pattern);
    if (!re) return re.error();
    d.splits.push_back(std::move(re.value()));
    return {};
}

void_result load_pre_tokenizer_step(const json::object& p, tokenizer_data& d, bool& byte_level) {
    std::string_view type = text(p, "type");
    if (type == "Sequence") {
        const json::value* list = field(p, "pretokenizers");
        if (!list || !list->is_array()) return bad("pre_tokenizer Sequence without 'pretokenizers'");
        for (const json::value& step : list->as_array()) {
            if (!step.is_object()) return bad("pre_tokenizer step is not an object");
            if (auto r = load_pre_tokenizer_step(step.as_object(), d, byte_level); !r) return r;
        }
        return {};
    }
    if (type == "Split") {
        if (text(p, "behavior") != "Isolated" || flag(p, "invert", false)) {
            return unsupported("Split behavior '" + std::string(text(p, "behavior")) + "' (only Isolated)");
        }
        const json::value* pat = field(p, "pattern");
        if (!pat || !pat->is_object()) return bad("Split without a pattern");
        if (auto re = text(pat->as_object(), "Regex"); !re.empty()) return add_split(d, std::string(re));
        if (auto lit = text(pat->as_object(), "String"); !lit.empty()) return add_split(d, escape_literal(lit));
        return bad("Split pattern has neither Regex nor String");
    }
    if (type == "ByteLevel") {
        if (flag(p, "add_prefix_space", false)) return unsupported("ByteLevel add_prefix_space");
        byte_level = true;
        return flag(p, "use_regex", true) ? add_split(d, gpt2_pattern) : void_result{};
    }
    return unsupported("pre_tokenizer '" + std::string(type) + "'");
}

void_result load_pre_tokenizer(const json::object& root, tokenizer_data& d) {
    const json::value* p = field(root, "pre_tokenizer");
    if (!p || !p->is_object()) return unsupported("tokenizer without a ByteLevel pre_tokenizer");
    bool byte_level = false;
    if (auto r = load_pre_tokenizer_step(p->as_object(), d, byte_level); !r) return r;
    if (!byte_level) return unsupported("tokenizer without a ByteLevel pre_tokenizer");
    return {};
}

void build_token_bytes(tokenizer_data& d) {
    d.byte_offsets.assign(d.tokens.size() + 1, 0);
    std::vector<std::uint8_t> is_added(d.tokens.size(), 0);
    for (const added_token& t : d.added) is_added[static_cast<std::size_t>(t.id)] = 1;
    for (std::size_t id = 0; id < d.tokens.size(); ++id) {
        const std::string& tok = d.tokens[id];
        std::string decoded;
        bool byte_level = !is_added[id];
        for (std::size_t i = 0; byte_level && i < tok.size();) {
            int b = byte_level_byte_of(next_code_point(tok, i));
            if (b < 0) byte_level = false;
            decoded.push_back(static_cast<char>(b));
        }
        // Tokens outside the byte alphabet (never in Qwen's vocab) decode to themselves.
        d.bytes += byte_level ? decoded : tok;
        d.byte_offsets[id + 1] = static_cast<std::uint32_t>(d.bytes.size());
        d.max_token_bytes = std::max<std::size_t>(d.max_token_bytes, d.byte_offsets[id + 1] - d.byte_offsets[id]);
    }
}

std::optional<std::string> token_text(const json::value* v) {
    if (!v) return std::nullopt;
    if (v->is_string()) return std::string(v->as_string());
    if (v->is_object()) {
        if (const json::value* c = field(v->as_object(), "content"); c && c->is_string()) return std::string(c->as_string());
    }
    return std::nullopt;
}

void_result load_config(const std::filesystem::path& file, tokenizer_data& d) {
    auto cfg = read_json_file(file);
    if (!cfg) return cfg.error();
    if (!cfg->is_object()) return make_error(status::parse_error, file.string() + ": not a JSON object");
    const json::object& c = cfg->as_object();
    if (const json::value* m = field(c, "model_max_length")) {
        if (m->is_int64()) d.model_max_length = m->as_int64();
        else if (m->is_uint64()) d.model_max_length = std::numeric_limits<std::int64_t>::max();
        else if (m->is_double()) d.model_max_length = m->as_double() >= 9.2e18 ? std::numeric_limits<std::int64_t>::max()
                                                                              : static_cast<std::int64_t>(m->as_double());
    }
    std::vector<std::string> eos_names;
    if (auto eos = token_text(field(c, "eos_token"))) eos_names.push_back(*eos);
    eos_names.insert(eos_names.end(), {"<|im_end|>", "<|endoftext|>"});
    for (const std::string& name : eos_names) {
        auto it = d.token_ids.find(name);
        if (it != d.token_ids.end() && std::find(d.eos_ids.begin(), d.eos_ids.end(), it->second) == d.eos_ids.end()) {
            d.eos_ids.push_back(it->second);
        }
    }
    std::string_view tmpl = text(c, "chat_template");
    d.chatml_template = tmpl.find("<|im_start|>") != std::string_view::npos;
    return {};
}

}  // namespace

void set_vocab_token(tokenizer_data& d, token_id id, std::string token) { set_token(d, id, std::move(token)); }
void_result add_split_regex(tokenizer_data& d, const std::string& pattern) { return add_split(d, pattern); }
void finish_token_bytes(tokenizer_data& d) { build_token_bytes(d); }

result<std::unique_ptr<tokenizer_data>> load_tokenizer_data(const std::filesystem::path& dir) {
    if (std::filesystem::is_regular_file(dir)) return load_tokenizer_data_gguf(dir);
    auto root = read_json_file(dir / "tokenizer.json");
    if (!root) return root.error();
    if (!root->is_object()) return bad("not a JSON object");
    static std::atomic<std::uint64_t> generations{0};
    auto d = std::make_unique<tokenizer_data>();
    d->generation = ++generations;
    const json::object& o = root->as_object();
    for (auto step : {load_model, load_added_tokens, load_normalizer, load_pre_tokenizer}) {
        if (auto r = step(o, *d); !r) return r.error();
    }
    build_token_bytes(*d);
    if (auto r = load_config(dir / "tokenizer_config.json", *d); !r) return r.error();
    return d;
}

}  // namespace calserve::model::detail
