// The tokenizer embedded in a GGUF file (llama.cpp's tokenizer.ggml.* keys) as
// tokenizer_data: the same vocabulary, added tokens, merges, NFC and split regex
// that tokenizer.json describes for the Qwen2/Qwen3 byte-level BPE, so encode()
// gives the same ids from either source.
#include <algorithm>
#include <atomic>

#include "model/weights/gguf_model.hpp"
#include "model/tokenizer/data.hpp"

namespace calserve::model::detail {
namespace {

// llama.cpp's pre-tokenizer "qwen2": the Split regex of Qwen2/Qwen3's tokenizer.json.
constexpr const char* qwen2_pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GGUF token types (llama.cpp's llama_token_type).
constexpr std::int64_t k_tok_control = 3, k_tok_user = 4, k_tok_unused = 5;
constexpr std::size_t k_max_tokens = 1u << 20;  // bpe_merges ids are 20-bit

error_info bad(const std::string& what) { return make_error(status::parse_error, "GGUF tokenizer: " + what); }

result<const gguf::value*> array_of(const gguf::header& h, std::string_view key, bool strings) {
    const gguf::value* v = h.find(key);
    if (!v) return bad("missing " + std::string(key));
    const bool is_strings = v->type == gguf::value_type::array && v->elem == gguf::value_type::string;
    const bool is_ints = v->type == gguf::value_type::array && !is_strings && v->floats.empty() &&
                         v->elem != gguf::value_type::f32 && v->elem != gguf::value_type::f64;
    if (strings ? !is_strings : !is_ints) return bad(std::string(key) + " has the wrong type");
    return v;
}

void_result check_kind(const gguf::header& h) {
    auto model = h.string("tokenizer.ggml.model");
    auto pre = h.string("tokenizer.ggml.pre");
    if (!model || !pre) return bad("tokenizer.ggml.model / .pre must be strings");
    if (!*model) return make_error(status::not_found, "GGUF file has no embedded tokenizer (tokenizer.ggml.model)");
    if (model->value_or("") != "gpt2")
        return make_error(status::unsupported, "GGUF tokenizer model '" + model->value_or("") + "' (only gpt2)");
    if (pre->value_or("") != "qwen2")
        return make_error(status::unsupported, "GGUF pre-tokenizer '" + pre->value_or("") + "' (only qwen2)");
    return {};
}

void_result load_tokens(const gguf::header& h, tokenizer_data& d) {
    auto tokens = array_of(h, "tokenizer.ggml.tokens", true);
    if (!tokens) return tokens.error();
    const auto& list = (*tokens)->strings;
    if (list.empty() || list.size() > k_max_tokens) return bad("token count " + std::to_string(list.size()));
    std::vector<std::int64_t> types(list.size(), 1);
    if (h.find("tokenizer.ggml.token_type")) {
        auto tt = array_of(h, "tokenizer.ggml.token_type", false);
        if (!tt) return tt.error();
        if ((*tt)->ints.size() != list.size()) return bad("token_type and tokens differ in length");
        types = (*tt)->ints;
    }
    d.tokens.reserve(list.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
        const auto id = static_cast<token_id>(i);
        if (types[i] == k_tok_unused) continue;
        if (list[i].empty()) return bad("token " + std::to_string(i) + " is empty");
        if (types[i] == k_tok_control || types[i] == k_tok_user) {
            if (find_invalid_utf8(list[i]) != utf8_valid) return bad("added token " + std::to_string(i) + " is not UTF-8");
            d.added.push_back({list[i], id, types[i] == k_tok_control, false, false});
            set_vocab_token(d, id, list[i]);
            d.special[i] = types[i] == k_tok_control ? 1 : 0;
        } else {
            set_vocab_token(d, id, list[i]);
        }
        d.token_ids[list[i]] = id;
    }
    if (auto b = fill_byte_ids(d)) return bad("byte-level vocab lacks the token for byte " + std::to_string(*b));
    return {};
}

void_result load_merges(const gguf::header& h, tokenizer_data& d) {
    auto merges = array_of(h, "tokenizer.ggml.merges", true);
    if (!merges) return merges.error();
    const auto byte_ids = d.merges.byte_ids;
    d.merges = bpe_merges((*merges)->strings.size());
    std::size_t rank = 0;
    for (const std::string& m : (*merges)->strings) {
        const auto space = m.find(' ');
        if (space == std::string::npos) return bad("merge " + std::to_string(rank) + " is not 'a b'");
        auto l = d.token_ids.find(std::string_view(m).substr(0, space));
        auto r = d.token_ids.find(std::string_view(m).substr(space + 1));
        auto merged = d.token_ids.find(m.substr(0, space) + m.substr(space + 1));
        if (l == d.token_ids.end() || r == d.token_ids.end() || merged == d.token_ids.end())
            return bad("merge " + std::to_string(rank) + " uses a token not in the vocab");
        if (!d.merges.add(l->second, r->second, merged->second))
            return make_error(status::unsupported, "GGUF tokenizer: merge table too large");
        ++rank;
    }
    d.merges.byte_ids = byte_ids;
    d.merges.index_byte_pairs();
    return {};
}

// End-of-sequence ids, the chat template's kind and the context bound.
void_result load_specials(const gguf::header& h, tokenizer_data& d) {
    auto eos = h.integer("tokenizer.ggml.eos_token_id");
    if (!eos) return eos.error();
    if (*eos && d.has_id(static_cast<token_id>(**eos))) d.eos_ids.push_back(static_cast<token_id>(**eos));
    for (const char* name : {"<|im_end|>", "<|endoftext|>"}) {
        auto it = d.token_ids.find(std::string_view(name));
        if (it != d.token_ids.end() && std::find(d.eos_ids.begin(), d.eos_ids.end(), it->second) == d.eos_ids.end())
            d.eos_ids.push_back(it->second);
    }
    auto tmpl = h.string("tokenizer.chat_template");
    if (!tmpl) return tmpl.error();
    d.chatml_template = tmpl->value_or("").find("<|im_start|>") != std::string::npos;
    auto arch = h.string("general.architecture");
    if (arch && *arch) {
        auto ctx = h.integer(**arch + ".context_length");
        if (ctx && *ctx) d.model_max_length = **ctx;
    }
    return {};
}

}  // namespace

result<std::unique_ptr<tokenizer_data>> load_tokenizer_data_gguf(const std::filesystem::path& file) {
    auto h = read_gguf_header(file);
    if (!h) return h.error();
    if (auto r = check_kind(*h); !r) return r.error();
    static std::atomic<std::uint64_t> generations{1ull << 62};  // apart from the tokenizer.json loader's
    auto d = std::make_unique<tokenizer_data>();
    d->generation = ++generations;
    if (auto r = load_tokens(*h, *d); !r) return r.error();
    if (auto r = load_merges(*h, *d); !r) return r.error();
    if (auto r = index_added_tokens(*d); !r) return r.error();
    d->nfc = true;  // Qwen2/Qwen3's tokenizer.json normaliser; GGUF does not record it
    if (auto r = add_split_regex(*d, qwen2_pattern); !r) return r.error();
    finish_token_bytes(*d);
    if (auto r = load_specials(*h, *d); !r) return r.error();
    return d;
}

}  // namespace calserve::model::detail
