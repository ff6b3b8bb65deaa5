#include "tests/fuzz/fuzz_support.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "config/config.hpp"
#include "net/server_impl.hpp"

namespace calserve::fuzz {

std::shared_ptr<const model::tokenizer> qwen3_tokenizer() {
    static const std::shared_ptr<const model::tokenizer> tok = [] {
        const char* env = std::getenv("CALSERVE_TOKENIZER_DIR");
        const std::filesystem::path dir =
            env ? std::filesystem::path(env) : std::filesystem::path(CALSERVE_SOURCE_DIR) / ".cache" / "tokenizer-qwen3";
        auto t = model::tokenizer::load(dir);
        if (!t) {
            std::fprintf(stderr, "fuzz: cannot load the tokenizer from %s: %s (run tools/bootstrap)\n",
                         dir.c_str(), t.error().what().c_str());
            std::exit(2);
        }
        return std::move(*t);
    }();
    return tok;
}

tokenizer_engine::tokenizer_engine(std::shared_ptr<const model::tokenizer> tok) : tok_(std::move(tok)) {
    card_ = actors::model_card{"fuzz-model", k_usable_context, tok_->vocab_size(), "sim"};
}

void_result tokenizer_engine::submit(actors::generation_request request, std::shared_ptr<actors::generation_sink> sink) {
    if (request.prompt.empty()) return make_error(status::invalid_argument, "empty prompt");
    if (request.prompt.size() > k_stub_admit_tokens) return make_error(status::queue_full, "stub queue full");
    actors::generated_token t;
    t.token = request.prompt.front();
    t.text = std::string(tok_->token_bytes_view(t.token));
    t.logprob = -0.25f;
    if (request.sampling.top_logprobs > 0) t.top = {{t.token, -0.25f}, {0, -3.0f}};
    sink->on_token(t);
    actors::generation_result r;
    r.reason = actors::finish_reason::length;
    r.tokens = {static_cast<std::int64_t>(request.prompt.size()), 1};
    sink->on_finish(r);
    return {};
}

result<std::vector<actors::token_id>> tokenizer_engine::encode(std::string_view text) const {
    return tok_->encode(text);
}

result<std::string> tokenizer_engine::decode(const std::vector<actors::token_id>& ids) const {
    return tok_->decode(ids);
}

result<std::string> tokenizer_engine::apply_chat_template(const std::vector<actors::chat_message>& messages,
                                                          bool add_generation_prompt) const {
    return tok_->apply_chat_template(messages, add_generation_prompt);
}

fuzz_server::fuzz_server() : engine(qwen3_tokenizer()), metrics(registry) {
    auto o = net::server_options::from_config(config::defaults());
    o.api_key = std::string(k_api_key);
    srv = std::make_shared<net::http_server::impl>(ioc, engine, metrics, std::move(o));
}

fuzz_server& shared_server() {
    static fuzz_server s;
    return s;
}

std::vector<std::string_view> split(std::string_view in, char sep, std::size_t max_parts) {
    std::vector<std::string_view> out;
    while (out.size() + 1 < max_parts) {
        const auto at = in.find(sep);
        if (at == std::string_view::npos) break;
        out.push_back(in.substr(0, at));
        in.remove_prefix(at + 1);
    }
    out.push_back(in);
    return out;
}

bool valid_utf8(std::string_view s) {
    std::size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        std::uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
        for (std::size_t k = 1; k < n; ++k) {
            const auto cc = static_cast<unsigned char>(s[i + k]);
            if ((cc >> 6) != 0x2) return false;
            cp = (cp << 6) | (cc & 0x3F);
        }
        const std::uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += n;
    }
    return true;
}

}  // namespace calserve::fuzz
